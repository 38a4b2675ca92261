"""Inference engine: a plain-torch forward of Qwen2 / Llama / Qwen3 causal LMs for the rollouts.

Source: RL-for-LLM stacks sample with a serving engine (vLLM, SGLang) that runs the policy in
its own forward, apart from the trainer's, with the weights pushed to it at every step; TIM
(Zhong et al., arXiv 2605.14220; V2) for the mismatch that separation brings. This module is
such an engine on a CPU, for :class:`tailtheory.engine.rollout.engine.RolloutEngine` with
``backend="fast"``. The Hugging Face KV-cache ``forward`` spends most of a small model's decode
step outside the arithmetic (cache objects concatenated at every step, mask building, module
dispatch, ``repeat_kv`` copies of the cache); here a step is a few dozen tensor ops a layer:

- **Weights** are read from the trainer ``model`` at every :meth:`InferenceEngine.sync`, in the
  engine's dtype (:data:`DTYPES`): ``float32``, ``bf16``, ``fp16``, or ``fp8`` = the Linear
  weights of the transformer blocks quantised to e4m3 and dequantised to bfloat16 by
  ``tailtheory.engine.rollout.copies`` (``fp8_quantize`` / ``fp8_dequantize`` / ``fp8_weight_names``:
  the values of the ``fp8`` inference copy), the rest cast to bfloat16, the forward in
  bfloat16. q/k/v form one matrix, gate/up another. A sync may also be given replacement
  values for some weights (the ``weight_noise`` path's, ``tailtheory.engine.rollout.noise``).
- **The forward** follows the Hugging Face eager code op for op: RMSNorm in float32 then cast,
  Qwen3's per-head RMSNorm of q and k (``q_norm`` / ``k_norm`` over ``head_dim``) before the
  rotary embedding, rotary embeddings (``cos`` / ``sin`` of ``position * inv_freq`` in float32,
  times the rope's attention scaling, cast to the dtype; ``inv_freq`` and the scaling from
  ``tailtheory.engine.rollout.families.rope_frequencies``: the default formula or
  ``transformers``' own initialiser for ``llama3``; a 16-bit engine rounds ``inv_freq`` to its
  dtype first, as the cast copy of ``copies.inference_copy`` does with that buffer),
  grouped-query attention with additive ``finfo.min`` masks and a float32 softmax, SiLU-gated
  MLP, the biases the model has (Qwen2's q/k/v; Llama's ``attention_bias`` q/k/v/o and
  ``mlp_bias``; Qwen3's ``attention_bias`` q/k/v/o), a ``head_dim`` other than
  ``hidden / heads``, tied or untied ``lm_head``. Its logits are the model's up to reduction
  order. The models it runs and the config fields it refuses:
  ``tailtheory.engine.rollout.families`` (``unsupported`` / ``supports`` / ``ARCHS``, importable
  from here too).
- **16-bit GEMMs**: the weights and the KV cache of a 16-bit engine hold that dtype's values in
  float32 tensors; a product runs in float32 and is rounded to the dtype: a 16-bit GEMM with
  float32 accumulation, as the GPU kernels compute it. Elementwise ops run in the dtype. On this
  CPU torch's own bfloat16 GEMM runs at half float32's speed at these sizes ((256 x 128) @
  (128 x 512): 427 us against 236 us; this way 271 us) and its bfloat16 attention ``bmm`` at
  2.0 ms against 0.9 ms.
- **KV cache**: preallocated keys and values ``(L, B, k, P + T, d)``, kept from call to call
  (fresh memory costs a page fault per 4 KiB on first write: a third of a B = 256 prefill);
  prompts are left-padded (``tailtheory.core.forward.left_pad``) and positions count from each
  row's first real token, so response token ``t`` of a row with prompt length ``n`` sits at
  column ``P + t``, position ``n + t``.
- **Shared prompts**: identical consecutive prompts (the trainer passes each prompt G times in
  a row) are prefilled once and their cache broadcast to the G rows.
- **Finished rows** leave the forward: the cache is compacted to the live rows (:data:`COMPACT`).
- **What is equal**: a shared prefill and a compacted step give the logits of a prefill of every
  row and of a step over every row equal to float32 rounding; bitwise only on one CPU's kernels
  (the GEMMs run on fewer rows, and their blocking, hence reduction order, depends on the row
  count and the CPU: an AMD EPYC differs in the last bits). The ``kv`` path's
  log-probs equal the trainer's full forward's to float32 rounding too. Bitwise holds for the
  same call on the same shapes in one process (same seed, same batch: what resume relies on).

Measured on one thread of this 2-core CPU (``benchmarks/bench_rollout.py``: the kk_trace warm
start's size, hidden 128, 4 layers, V = 512; B = 256 = 32 prompts x 8; prompts of 22-32 tokens;
up to 120 new tokens; ``benchmarks/results/rollout.json``):

- Speed, tokens/s, fast against hf: every row at 120 tokens, float32 (path ``kv``) 17.7k
  against 6.8k (2.6x), bfloat16 15.7k against 9.7k (1.6x); rows finishing at spread lengths
  (mean ~52), float32 15.9k against 2.8k (5.6x), bfloat16 14.1k against 4.4k (3.2x). The
  machine was shared: ratios moved by ~15% between runs (2.6-2.9x, 4.3-5.6x for float32). A
  full-length float32 step (~14 ms) is ~4 ms of attention (reading the cache), ~3 ms of the
  sampler's ``torch.multinomial`` over (B, V), ~3 ms of GEMMs.
- Fused q/k/v and gate/up: one layer's products of a B = 256 decode step take 123 us against
  125 us as three matrices (q/k/v) and 260 us against 265 us as two (gate/up): ~0.2% of a step.
  Kept: it costs nothing and one rotary op covers q and k.
- Finished rows: see :data:`COMPACT`.
- ``torch.compile`` is not used. Inductor on this CPU, ``dynamic=True``, the decode step's block
  compiled, float32: the first generate takes 13.6 s against 1.9 s (~11.7 s of compiling), then
  16.2-16.4k tokens/s against 16.1k eager with every row at full length (~1%) and 15.0-15.6k
  against 14.4k with rows finishing early (~5%, 0.05 s a generate): it pays back after ~200
  generates in a process, if at all within this machine's noise, and its fused kernels change
  the rounding points that the 16-bit engines share with the Hugging Face copies. The whole
  forward compiled breaks the graph at the rotary table lookup and recompiles as shapes change:
  142 s for the first generate, 1.4k tokens/s after.
- Also tried: keys stored transposed ``(d, S)`` for the score product (no gain end to end);
  attention is bound by reading the cache (~13 GB/s on one core here).

Shapes: B rows, P prompt width, T new tokens, L layers, H hidden, V vocabulary, h / k query /
key-value heads, d head dim, A rows in the cache; ``Decode.logits`` (A, V) of ``Decode.rows``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from tailtheory.core.forward import position_ids
from tailtheory.engine.rollout.copies import (FP8_SCALING, fp8_dequantize, fp8_quantize, fp8_dtype,
                                        fp8_weight_names)
from tailtheory.engine.rollout.families import head_dim, rope_frequencies, unsupported
from tailtheory.engine.rollout.families import ARCHS, supports  # noqa: F401 (importers of fast)

DTYPES = {"float32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16,
          "fp8": torch.bfloat16}
"""Engine dtypes and the dtype the forward computes in."""

COMPACT = 0.25
"""Compact the cache to the live rows once this fraction of its rows has finished; until then
finished rows ride along (their logits unused). B = 256, rows finishing at lengths spread over
1-120 (mean ~52), fast backend tokens/s, float32 / bfloat16: compact at every finished row
(0) 11.6k / 11.2k; 0.25: 15.9k / 14.4k; 0.5: 14.5k / 13.5k; never, compute all rows and mask
(1) 9.5k / 8.4k (``bench_rollout.py --ablate``). A compaction copies the filled cache of the
live rows, so doing it at every finish costs more than it saves; at 0.25 the copies sum to a
few full-cache copies."""

def _cat_bias(*mods) -> torch.Tensor | None:
    biases = [m.bias for m in mods]
    if all(b is None for b in biases):
        return None
    return torch.cat([b if b is not None else m.weight.new_zeros(m.weight.shape[0])
                      for b, m in zip(biases, mods)])


class InferenceEngine:
    """The forward of a supported trainer ``model`` (see :func:`supports`) in ``dtype``.

    ``dtype``: a key of :data:`DTYPES`; ``fp8_scaling``: the ``fp8`` scales (``channel`` or
    ``tensor``, as ``tailtheory.engine.rollout.copies``). :meth:`sync` reloads the weights;
    :meth:`start` prefills a batch and returns its :class:`Decode`.
    """

    def __init__(self, model, dtype: str = "float32", fp8_scaling: str = FP8_SCALING,
                 weights: dict[str, torch.Tensor] | None = None):
        if dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {tuple(DTYPES)}, got {dtype!r}")
        reason = unsupported(model)
        if reason:
            raise ValueError(f"the inference engine cannot run this model: {reason}")
        if dtype == "fp8":
            fp8_dtype()
        self.name, self.dtype, self.fp8_scaling = dtype, DTYPES[dtype], fp8_scaling
        c = model.config
        self.n_heads, self.n_kv = c.num_attention_heads, c.num_key_value_heads
        self.head_dim, self.eps = head_dim(c), float(c.rms_norm_eps)
        inv_freq, self.rope_scaling = rope_frequencies(c)              # as the model's rotary
        self.inv_freq = inv_freq.to(self.dtype).float()  # a cast copy rounds the buffer too
        self._cos = self._sin = None
        self._buffers: dict[str, torch.Tensor] = {}
        self.sync(model, weights)

    @torch.no_grad()
    def sync(self, model, weights: dict[str, torch.Tensor] | None = None) -> None:
        """Load the weights of the trainer ``model`` (float32) in the engine's dtype; ``weights``
        (parameter name -> tensor of its shape) replace those they name (``weight_noise``)."""
        dev = next(model.parameters()).device
        self.inv_freq = self.inv_freq.to(dev)
        named = dict(model.named_parameters())
        unknown = sorted(set(weights or ()) - set(named))
        if unknown:
            raise ValueError(f"weights names no parameter of the model: {unknown[:3]}")
        swap = {id(named[n]): t for n, t in (weights or {}).items()}
        q8 = {id(named[n]) for n in fp8_weight_names(model) if n in named} \
            if self.name == "fp8" else set()

        def w(t: torch.Tensor, mm: bool = True) -> torch.Tensor:
            t = swap.get(id(t), t)
            if id(t) in q8:
                t = fp8_dequantize(*fp8_quantize(t, self.fp8_scaling), dtype=self.dtype)
            t = t.detach().to(self.dtype, copy=True)        # the dtype's values ...
            return t.float() if mm else t                    # ... kept in float32 for a GEMM

        def b(t):
            return None if t is None else w(t)

        def qk_norm(a):  # Qwen3: (h + k, d), the q_norm weight for h heads, k_norm's for k
            if getattr(a, "q_norm", None) is None:
                return None
            h, k, d = self.n_heads, self.n_kv, self.head_dim
            return torch.cat([w(a.q_norm.weight, False).expand(h, d),
                              w(a.k_norm.weight, False).expand(k, d)])

        self.layers = []
        for layer in model.get_decoder().layers:
            a, m = layer.self_attn, layer.mlp
            self.layers.append((
                w(layer.input_layernorm.weight, False),
                w(layer.post_attention_layernorm.weight, False),
                torch.cat([w(a.q_proj.weight), w(a.k_proj.weight), w(a.v_proj.weight)]),
                b(_cat_bias(a.q_proj, a.k_proj, a.v_proj)), w(a.o_proj.weight), b(a.o_proj.bias),
                torch.cat([w(m.gate_proj.weight), w(m.up_proj.weight)]),
                b(_cat_bias(m.gate_proj, m.up_proj)), w(m.down_proj.weight), b(m.down_proj.bias),
                qk_norm(a)))
        backbone = model.get_decoder()
        self.embed = w(model.get_input_embeddings().weight, False)
        self.norm = w(backbone.norm.weight, False)
        head = model.get_output_embeddings()
        self.head, self.head_bias = w(head.weight), b(getattr(head, "bias", None))

    # --- the forward -------------------------------------------------------------------------

    def _rms(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return weight * xf.to(x.dtype)

    def _rotary(self, n: int, device) -> tuple[torch.Tensor, torch.Tensor]:
        """``cos``, ``sin`` tables ``(n, d)`` for positions ``0 .. n-1`` (HF's formula)."""
        if self._cos is None or self._cos.shape[0] < n or self._cos.device != device:
            freqs = torch.arange(n, device=device).float()[:, None] * self.inv_freq.to(device)
            emb = torch.cat((freqs, freqs), -1)
            cos, sin = emb.cos() * self.rope_scaling, emb.sin() * self.rope_scaling
            self._cos, self._sin = cos.to(self.dtype), sin.to(self.dtype)
        return self._cos, self._sin

    def _mm(self, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None = None):
        """``x @ w^T + b`` for float32 ``w``, ``b`` holding the dtype's values: a 16-bit GEMM
        with float32 accumulation, its result rounded to the dtype (module docstring)."""
        if self.dtype == torch.float32:
            return F.linear(x, w, b)
        return F.linear(x.float(), w, b).to(self.dtype)

    def _bmm(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        if self.dtype == torch.float32:
            return torch.matmul(a, b)
        return torch.matmul(a.float(), b).to(self.dtype)

    def forward(self, x: torch.Tensor, pos: torch.Tensor, mask: torch.Tensor, cache,
                col: int) -> torch.Tensor:
        """Run the blocks on hidden states ``x (N, q, H)`` at positions ``pos (N, q)``.

        Writes keys and values to cache columns ``col .. col+q-1`` of slots ``0 .. N-1`` and
        attends over columns ``0 .. col+q-1`` with the additive ``mask (N, 1, q, col+q)``.
        Returns the final-normed hidden states (N, q, H).
        """
        N, q, _ = x.shape
        h, k, d = self.n_heads, self.n_kv, self.head_dim
        g, end, half, scale = h // k, col + q, d // 2, d ** -0.5
        K, V = cache
        cos, sin = self._rotary(int(pos.max()) + 1, x.device)
        cos, sin = cos[pos][:, :, None], sin[pos][:, :, None]       # (N, q, 1, d)
        for li, (ln1, ln2, wqkv, bqkv, wo, bo, wgu, bgu, wd, bd, qkn) in enumerate(self.layers):
            y = self._mm(self._rms(x, ln1), wqkv, bqkv).view(N, q, h + 2 * k, d)
            qk = y[:, :, :h + k]                                    # rotary on q and k at once
            if qkn is not None:                                     # Qwen3: q/k norm first
                qk = self._rms(qk, qkn)
            qk = qk * cos + torch.cat((-qk[..., half:], qk[..., :half]), -1) * sin
            K[li, :N, :, col:end] = qk[:, :, h:].transpose(1, 2)
            V[li, :N, :, col:end] = y[:, :, h + k:].transpose(1, 2)
            qh = qk[:, :, :h].transpose(1, 2).reshape(N, k, g * q, d)  # head j uses kv j // g
            s = self._bmm(qh, K[li, :N, :, :end].transpose(-1, -2)) * scale
            s = s.view(N, k, g, q, end) + mask[:, :, None]             # (N, k, g, q, end)
            p = torch.softmax(s, -1, dtype=torch.float32).to(x.dtype).view(N, k, g * q, end)
            o = self._bmm(p, V[li, :N, :, :end]).view(N, h, q, d).transpose(1, 2)
            x = x + self._mm(o.reshape(N, q, h * d), wo, bo)
            gate, up = self._mm(self._rms(x, ln2), wgu, bgu).chunk(2, -1)
            x = x + self._mm(F.silu(gate) * up, wd, bd)
        return self._rms(x, self.norm)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """LM head: ``hidden (..., H) -> (..., V)`` in the engine's dtype."""
        return self._mm(hidden, self.head, self.head_bias)

    @torch.inference_mode()
    def full_logits(self, ids: torch.Tensor, attn: torch.Tensor) -> torch.Tensor:
        """Logits at every position of left-padded ``ids (B, P)`` (mask ``attn``): the engine's
        counterpart of ``tailtheory.core.forward.full_forward``. -> (B, P, V)."""
        B, P = ids.shape
        cache = self._cache(B, P, ids.device)
        x = self.forward(self.embed[ids], position_ids(attn), self._prefill_mask(attn), cache, 0)
        return self.logits(x)

    def _cache(self, B: int, S: int, device, slot: str = "main") -> tuple[torch.Tensor, ...]:
        """Keys and values ``(L, B, k, S, d)``, float32 (see the module docstring), in buffers
        kept from call to call: one :class:`Decode` per engine at a time."""
        shape = (len(self.layers), B, self.n_kv, S, self.head_dim)
        n = 2 * torch.Size(shape).numel()
        buf = self._buffers.get(slot)
        if buf is None or buf.numel() < n or buf.device != torch.device(device):
            buf = self._buffers[slot] = torch.empty(n, device=device)
        return buf[:n // 2].view(shape), buf[n // 2:n].view(shape)

    def _prefill_mask(self, attn: torch.Tensor) -> torch.Tensor:
        """Additive (B, 1, P, P) mask: causal and no prompt padding as a key (HF's eager mask)."""
        P = attn.shape[1]
        causal = torch.ones(P, P, dtype=torch.bool, device=attn.device).tril()
        ok = causal[None] & attn.bool()[:, None, :]
        zero = torch.zeros(ok.shape, dtype=self.dtype, device=attn.device)
        return zero.masked_fill_(~ok, torch.finfo(self.dtype).min)[:, None]

    @torch.inference_mode()
    def start(self, ids: torch.Tensor, attn: torch.Tensor, max_new_tokens: int) -> "Decode":
        """Prefill the left-padded prompts ``ids (B, P)`` (mask ``attn``) with room for
        ``max_new_tokens``; identical consecutive prompts are prefilled once."""
        return Decode(self, ids, attn, max_new_tokens)


class Decode:
    """The decoding state of one batch: KV cache, live rows and their next-token logits.

    ``rows (A,)``: the batch rows in the cache (the live ones, and finished ones until the
    next compaction), ``logits (A, V)``: their next-token logits in the engine's dtype.
    :meth:`advance` feeds the sampled tokens.
    """

    def __init__(self, engine: InferenceEngine, ids: torch.Tensor, attn: torch.Tensor, T: int):
        self.engine = e = engine
        B, P = ids.shape
        self.P, self.t = P, 0
        attn = attn.bool()
        new = torch.ones(B, dtype=torch.bool, device=ids.device)    # first row of each group
        if B > 1:
            new[1:] = (ids[1:] != ids[:-1]).any(1) | (attn[1:] != attn[:-1]).any(1)
        first = new.nonzero()[:, 0]                                # (U,)
        self.cache = e._cache(B, P + T, ids.device)
        shared = len(first) < B
        pre = e._cache(len(first), P, ids.device, "prefill") if shared else self.cache
        x = e.forward(e.embed[ids[first]], position_ids(attn[first]), e._prefill_mask(attn[first]),
                      pre, 0)
        z = e.logits(x[:, -1])                                      # (U, V)
        if shared:                                                  # copy to the group's rows
            group = new.long().cumsum(0) - 1                        # (B,) row -> its group
            U = len(first)
            even = B % U == 0 and torch.equal(group, torch.arange(U, device=ids.device)
                                              .repeat_interleave(B // U))
            for c, p in zip(self.cache, pre):                       # (L, B, k, P, d)
                if even:                                            # G rows each: a broadcast
                    c[:, :, :, :P].unflatten(1, (U, B // U)).copy_(p.unsqueeze(2))
                else:
                    c[:, :, :, :P] = p.index_select(1, group)
            z = z[group]
        self.logits, self.rows = z, torch.arange(B, device=ids.device)
        self.lens = attn.sum(1)                                     # (B,) true prompt lengths
        self.mask = torch.zeros(B, 1, 1, P + T, dtype=e.dtype, device=ids.device)
        self.mask[:, 0, 0, :P].masked_fill_(~attn, torch.finfo(e.dtype).min)  # prompt padding

    @torch.inference_mode()
    def advance(self, tokens: torch.Tensor, alive: torch.Tensor) -> None:
        """Feed the sampled ``tokens (B,)``; rows with ``alive (B,)`` False are done.

        The next :attr:`logits` are those of the live rows :attr:`rows`.
        """
        e, live, col = self.engine, alive[self.rows], self.P + self.t
        if col >= self.mask.shape[-1]:
            raise ValueError(f"the cache holds {self.mask.shape[-1] - self.P} new tokens; "
                             f"all are fed")
        dead = len(self.rows) - int(live.sum())
        if COMPACT * len(self.rows) <= dead < len(self.rows) and dead:  # drop finished rows
            keep = live.nonzero()[:, 0]
            for c in self.cache:
                c[:, :len(keep), :, :col] = c[:, keep, :, :col]
            self.mask, self.rows = self.mask[keep], self.rows[keep]
        pos = (self.lens[self.rows] + self.t)[:, None]
        x = e.forward(e.embed[tokens[self.rows]][:, None], pos, self.mask[..., :col + 1],
                      self.cache, col)
        self.logits = e.logits(x[:, 0])
        self.t += 1
