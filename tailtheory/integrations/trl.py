"""tailtheory's methods inside TRL 1.16's ``GRPOTrainer``: ``TailGRPOConfig``, ``TailGRPOTrainer``.

Install: ``pip install -e '.[trl]'`` (pins ``trl==1.16.*``). Use::

    from tailtheory.integrations.trl import TailGRPOConfig, TailGRPOTrainer
    args = TailGRPOConfig(output_dir="out", tail_method="ar+tis", loss_type="grpo", alpha=0.3)
    trainer = TailGRPOTrainer(model=model, reward_funcs=reward, args=args, train_dataset=data)

Every formula is the engine's (``tailtheory.engine.registry``): the adapter builds one
:class:`~tailtheory.engine.types.PolicyBatch` per generation batch and one per loss call, and
runs the registered methods on them. Where each stage hooks into TRL:

- **per generation batch** (``_generate_and_score_completions``, before TRL shuffles the batch
  and so while every group is whole): one no-grad forward at the sampling weights gives
  ``pi_old`` (= ``pi_train``); then the advantage (``otb``, from the rewards TRL computed, caught
  in ``_calculate_rewards``; otherwise TRL's own group advantage, so ``scale_rewards`` and the
  reward weights keep their meaning), the reweighting (``ar``), the correction weights (``tis``,
  ``seq_tis``, ``mis``, ``icepop``, ``token_reject``, ``seq_reject``, ``geo_reject``, ``trm``), the
  pass masks (``lopti``) and the kept vocabulary (``dvp``) are stored in the batch as
  ``advantages`` (B, T), ``tail_weight``, ``tail_passes`` (B, P, T) and ``tail_keep`` (B, T, V).
- **per loss call** (``_compute_loss``): the engine's loss (``grpo`` or ``dr_grpo``) on the
  trainer's log-probs, TRL's ``old_per_token_logps`` (or the detached log-probs, as TRL does), the
  stored advantages and weights; scaled as TRL scales its loss type (below).
- **Lopti's two passes** are TRL's ``num_iterations = 2`` (the generation batch reused, ``pi_old``
  not recomputed, as LOPTI's L3): iteration 0 updates the low-probability tokens, iteration 1
  the rest. TRL steps the optimiser even on an empty pass (zero gradient, but AdamW's momentum
  still moves the weights); the engine skips it.

``pi_roll``: TRL has a separate rollout log-prob only with vLLM, or with a ``rollout_func`` that
returns log-probs (``sampling_per_token_logps``). When present, the corrections use
``log_rho = log pi_train - log pi_roll`` (vLLM's unscorable NaN tokens get ``log_rho = 0``, as TRL
does). Without it, TRL samples with the trained model itself and the adapter takes
``pi_roll = pi_old``: ``log_rho = 0``, so every correction weight is 1 and the ``tail/mismatch/*``
metrics are 0 (the numerics of ``generate``'s KV cache are not seen). TRM's ``exact`` estimator
needs the rollout's full logits, which TRL never returns: with ``pi_roll = pi_old`` the exact
token KL is 0; with a separate rollout it raises (use ``trm_estimator="k2k3"``).

Full logits (DVP): TRL's fused LM head returns per-token log-probs without building the
``(B, T, V)`` logits, but DVP needs them for the kept set and the pruned log-softmax. The adapter
recomputes them with the model's own (unfused) forward at the completion positions, once without
gradient per generation batch and once with gradient per loss call (in place of the fused
forward). Measured on the CPU (tiny Qwen2, hidden 64, 2 layers, 16 x 32 completion tokens): the
loss call's forward + backward took 0.6-1.0x the fused path's time at V = 512 and 4096 (TRL's
fused head runs without Triton on a CPU); the cost is memory: ``4 B T V`` bytes of logits (1 MiB
at V = 512, 8 MiB at V = 4096) and their gradient per micro-batch, and the kept set (``B T V``
bytes) stored with the generation batch.
OTB's ``sum_v pi(v)^2`` needs no full logits: TRL's fused head computes ``log_sum_sq_probs``.

Loss scaling by TRL ``loss_type`` (``LOSS_AGG_OF``): ``grpo`` -> ``seq-mean-token-mean``, ``bnpo``
-> ``token-mean``, ``dr_grpo`` -> ``seq-mean-token-sum-norm`` with ``L = max_completion_length``,
each divided by the gradient-accumulation steps as TRL does; ``dapo`` -> ``token-mean`` rescaled
from the micro-batch's tokens to TRL's ``num_items_in_batch`` normaliser. With ``tail_method =
"grpo"`` the loss and its gradient equal TRL's own (tested). Not supported (a ``ValueError`` at
construction, since the engine's loss has no such term): ``loss_type`` cispo / sapo / luspo /
vespo, ``beta > 0`` (reference KL), ``delta``, ``importance_sampling_level="sequence"``,
``top_entropy_quantile < 1``, ``off_policy_mask_threshold``, the entropy bonus, MoE auxiliary
loss, vision-language models; TRL's vLLM importance-sampling correction together with a tail
correction (the same mismatch corrected twice; TRL's alone is applied as TRL applies it).

Knobs: ``TailGRPOConfig`` adds ``tail_method`` and every field of
:class:`~tailtheory.engine.types.MethodParams` (same names, defaults and docs, generated from
it) except those TRL already owns (``TRL_OWNED``): ``eps_low`` / ``eps_high`` are TRL's
``epsilon`` / ``epsilon_high``, ``temperature`` is TRL's, ``loss_agg`` / ``loss_norm_len`` follow
``loss_type`` / ``max_completion_length``. Metrics: the methods' own keys, prefixed ``tail/``
(``tail/tis/weight_mean``, ``tail/loss/clipfrac``, ``tail/mismatch/k3``), in TRL's logs.
Sources: LOPTI (arXiv 2505.12929), DVP (arXiv 2512.23087), TRM (arXiv 2512.23075), OTB (arXiv
2602.07078), TIM (arXiv 2605.14220). Shapes: ``B`` completions, ``T`` completion tokens.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass, field, fields, replace

import torch
from trl import GRPOConfig, GRPOTrainer

from tailtheory.core.estimators import k1, k3
from tailtheory.core.stats import masked_mean, token_stats
from tailtheory.engine.config import _validate_method_params, field_docs
from tailtheory.engine.registry import MethodSpec, correction_weight, parse_methods, passes
from tailtheory.engine.types import MethodParams, PolicyBatch
from tailtheory.integrations.trl_checks import LOSS_AGG_OF, check_trl_settings

TRL_OWNED = {"eps_low": "epsilon", "eps_high": "epsilon_high", "temperature": "temperature",
             "loss_agg": "loss_type", "loss_norm_len": "max_completion_length"}
"""``MethodParams`` fields whose value comes from a TRL knob (the TRL knob's name)."""

PREFIX = "tail/"
"""Namespace of the adapter's metrics in TRL's logs."""


def _with_method_params(cls):
    """Add every non-TRL-owned ``MethodParams`` field to ``cls`` (one default per knob), then
    make it a dataclass."""
    hints, docs = typing.get_type_hints(MethodParams), field_docs(MethodParams)
    for f in fields(MethodParams):
        if f.name not in TRL_OWNED:
            cls.__annotations__[f.name] = hints[f.name]
            setattr(cls, f.name, field(default=f.default, metadata={"help": docs.get(f.name, "")}))
    return dataclass(cls)


@_with_method_params
class TailGRPOConfig(GRPOConfig):
    """TRL's ``GRPOConfig`` plus a tailtheory method spec and the methods' hyperparameters.

    The added fields are ``tail_method`` and those of ``MethodParams`` not in :data:`TRL_OWNED`
    (``alpha``, ``eta``, ``tis_cap``, ..., ``dvp_rho``), with the engine's defaults. Everything is
    checked once, here: the spec (an unknown name lists the valid ones), the values (the engine's
    checks) and the TRL settings the adapter cannot honour.
    """

    tail_method: str = field(default="grpo", metadata={
        "help": "tailtheory method spec, e.g. grpo, ar+lopti, tis+mis (tailtheory methods)"})

    def __post_init__(self):
        super().__post_init__()
        check_trl_settings(self, self.tail_spec)
        _validate_method_params(self.method_params())

    @property
    def tail_spec(self) -> MethodSpec:
        """The parsed :attr:`tail_method`."""
        return parse_methods(self.tail_method)

    def method_params(self) -> MethodParams:
        """The ``MethodParams`` every method receives: the tail fields and the TRL-owned knobs."""
        own = {f.name: getattr(self, f.name) for f in fields(MethodParams)
               if f.name not in TRL_OWNED}
        eps_high = self.epsilon if self.epsilon_high is None else self.epsilon_high
        return MethodParams(**own, eps_low=self.epsilon, eps_high=eps_high,
                            temperature=self.temperature, loss_agg=LOSS_AGG_OF[self.loss_type],
                            loss_norm_len=self.max_completion_length
                            if self.loss_type == "dr_grpo" else 0)



class TailGRPOTrainer(GRPOTrainer):
    """TRL's ``GRPOTrainer`` running the tailtheory methods named by ``args.tail_method``.

    Takes the arguments of ``GRPOTrainer``; ``args`` must be a :class:`TailGRPOConfig`. See the
    module docstring for where each method hooks in, what is not supported, and the costs.
    """

    def __init__(self, *args_, args: TailGRPOConfig | None = None, **kwargs):
        if not isinstance(args, TailGRPOConfig):
            raise ValueError(f"args must be a TailGRPOConfig, got {type(args).__name__}")
        super().__init__(*args_, args=args, **kwargs)
        if self._is_vlm or self.aux_loss_enabled:
            raise ValueError("TailGRPOTrainer supports text-only, non-MoE-aux-loss models")
        self.tail_spec, self.tail_hp = args.tail_spec, args.method_params()
        self._tail_rewards: torch.Tensor | None = None
        if self.tail_spec.advantage is not None:  # otb: sum p^2 from TRL's fused head
            from trl.trainer.utils import add_fused_lm_head

            peft = hasattr(self.model, "get_base_model")
            base = self.model.get_base_model() if peft else self.model
            add_fused_lm_head(base, temperature=self.temperature,
                              cast_lm_head_to_fp32=args.cast_lm_head_to_fp32,
                              outputs=("log_probs", "entropy", "log_sum_sq_probs"))

    # ---- per generation batch ----------------------------------------------------------------

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions,
                                                      completion_ids_list)
        self._tail_rewards = rewards_per_func           # (B_global, n_funcs), for otb
        return rewards_per_func

    def _generate_and_score_completions(self, inputs):
        out = super()._generate_and_score_completions(inputs)
        return self._tail_prepare(out)

    def _log(self, metrics: dict) -> None:
        mode = "train" if self.model.training else "eval"
        for k, v in metrics.items():
            self._metrics[mode][PREFIX + k].append(float(v))

    def _tail_prepare(self, out: dict) -> dict:
        """Run the per-step stages on the whole generation batch; store their results in it."""
        spec, hp = self.tail_spec, self.tail_hp
        mask = _loss_mask(out)
        b, keep, m_vocab = self._step_batch(out, mask)
        trl_adv = out["advantages"].to(b.old_logp.dtype)
        if spec.advantage is not None:
            adv, m_adv = spec.advantage.fn(b, hp)
        else:  # the loss's group advantage: TRL's (scale_rewards, reward weights)
            adv = trl_adv[:, None] * mask
            m_adv = {"adv/abs_mean": masked_mean(adv.abs(), mask)}
        if spec.reweight is not None:
            adv, more = spec.reweight.fn(replace(b, adv=adv), hp)
            m_adv = {**m_adv, **more}
        weight, m_cor = correction_weight(spec, replace(b, adv=adv), hp)
        groups, m_sched = passes(spec, replace(b, adv=adv, weight=weight), hp)
        out["advantages"] = adv.to(torch.float32)
        out["tail_weight"] = weight.to(torch.float32)
        out["tail_passes"] = torch.stack([g for _, g in groups], dim=1)       # (B, P, T)
        if keep is not None:
            out["tail_keep"] = keep
            if "old_per_token_logps" in out:  # TRL's pi_old is unpruned; DVP needs the pruned one
                out["old_per_token_logps"] = b.old_logp.to(out["old_per_token_logps"].dtype)
        self._log({**_mismatch_metrics(b), **m_vocab, **m_adv, **m_cor, **m_sched})
        return out

    def _step_batch(self, out: dict, mask: torch.Tensor):
        """The generation batch's ``PolicyBatch`` at the sampling weights (``pi_old = pi_train``),
        the DVP kept set (or None) and the vocab stage's metrics."""
        spec, hp = self.tail_spec, self.tail_hp
        tokens = out["completion_ids"]
        with torch.no_grad():
            st = self._old_stats(out, need_sum_p2=spec.advantage is not None)
        keep, m_vocab = st.get("keep"), st.get("vocab_metrics", {})
        logp = st["logp"].masked_fill(~mask, 0.0)
        if keep is None and out.get("old_per_token_logps") is not None:
            logp = out["old_per_token_logps"].masked_fill(~mask, 0.0)    # TRL's own pi_old
        roll = out.get("sampling_per_token_logps")
        if roll is None:
            roll = logp                                           # pi_roll = pi_old (no rollout)
        else:  # vLLM's unscorable tokens: NaN -> no mismatch there, as TRL does
            roll = torch.where(torch.isnan(roll), logp, roll).masked_fill(~mask, 0.0)
        rewards, group_ids = self._rewards_and_groups(len(tokens), spec)
        tok_kl = None
        if any(m.name == "trm" for m in spec.corrections) and hp.trm_estimator == "exact":
            if out.get("sampling_per_token_logps") is not None:
                raise ValueError("trm_estimator='exact' needs the rollout's full logits, which TRL "
                                 "never returns; use trm_estimator='k2k3'")
            tok_kl = torch.zeros_like(logp)                  # pi_roll = pi_old: KL exactly 0
        b = PolicyBatch(logp=logp, old_logp=logp, roll_logp=roll, mask=mask, rewards=rewards,
                        group_ids=group_ids, sum_p2=st.get("sum_p2"), tok_kl=tok_kl, keep=keep,
                        tokens=tokens, train_logp=logp)
        return b, keep, m_vocab

    def _rewards_and_groups(self, n_local: int, spec: MethodSpec):
        """``(B,)`` outcome rewards (TRL's weighted sum) and group ids of this process's part."""
        if spec.advantage is None:
            return None, None
        if self.accelerator.num_processes > 1:
            raise ValueError(f"{spec.advantage.name} needs whole groups on one process; "
                             f"TailGRPOTrainer runs it on a single process only")
        r = self._tail_rewards
        w = self.reward_weights.to(r.device)
        unscorable = torch.isnan(r).all(dim=1)
        if unscorable.any():
            raise ValueError(f"{spec.advantage.name} needs a reward for every completion; "
                             f"{int(unscorable.sum())} got None from every reward function")
        rewards = (r * w[None]).nansum(dim=1).double()                # (B,)
        G = self.num_generations if self.model.training else self.num_generations_eval
        group_ids = torch.arange(n_local, device=r.device) // G
        return rewards, group_ids

    def _old_stats(self, out: dict, need_sum_p2: bool) -> dict:
        """One no-grad forward at the sampling weights, in chunks of the train batch size:
        ``logp`` (B, T) and, as the spec needs them, ``sum_p2`` (TRL's fused head) or the DVP
        kept set ``keep`` (B, T, V) with the pruned ``logp`` and ``sum_p2`` (full logits)."""
        ids, attn, C = _inputs(out)
        tokens = out["completion_ids"]
        bs = self.args.per_device_train_batch_size
        parts: dict[str, list] = {}
        for s in range(0, ids.shape[0], bs):
            sl = slice(s, s + bs)
            if self.tail_spec.vocab is not None:
                z = self._completion_logits(self.model, ids[sl], attn[sl], C)
                probe = PolicyBatch(logp=z[..., 0], old_logp=z[..., 0], roll_logp=z[..., 0],
                                    mask=attn[sl, -C:].bool(), logits=z, tokens=tokens[sl])
                keep, _ = self.tail_spec.vocab.fn(probe, self.tail_hp)   # metrics: below
                st = token_stats(z, tokens[sl], keep=keep, temperature=self.temperature)
                got = {"logp": st["logp"], "sum_p2": st["sum_p2"], "keep": keep,
                       "pruned_mass": st["pruned_mass"]}
            else:
                got = self._fused(self.model, ids[sl], attn[sl], C, need_sum_p2)
            for k, v in got.items():
                parts.setdefault(k, []).append(v)
        res = {k: torch.cat(v) for k, v in parts.items()}
        if "keep" in res:
            mask = attn[:, -C:].bool()
            kept = res["keep"].float().sum(-1)
            res["vocab_metrics"] = {"dvp/kept_vocab": masked_mean(kept, mask),
                                    "dvp/pruned_mass": masked_mean(res.pop("pruned_mass"), mask)}
        return res

    def _fused(self, model, ids, attn, C: int, need_sum_p2: bool) -> dict:
        """TRL's fused LM head (no ``(B, T, V)`` logits): log-probs, and ``sum p^2`` if asked."""
        labels = ids.masked_fill(attn == 0, -100)
        labels[:, :-C] = -100                                     # score the completion only
        with self.accelerator.autocast():
            o = model(input_ids=ids, attention_mask=attn, labels=labels, fused_lm_head=True)
        got = {"logp": o.log_probs[:, -C:].float()}
        if need_sum_p2:
            got["sum_p2"] = o.log_sum_sq_probs[:, -C:].double().exp()
        return got

    def _completion_logits(self, model, ids, attn, C: int) -> torch.Tensor:
        """The full logits at the completion positions (the model's unfused forward).
        Shapes: ids (B, P+C) -> (B, C, V)."""
        with self.accelerator.autocast():
            z = model(input_ids=ids, attention_mask=attn, logits_to_keep=C + 1).logits
        return z[:, :-1].float()

    # ---- per loss call -----------------------------------------------------------------------

    def _compute_loss(self, model, inputs):
        """The engine's loss on TRL's micro-batch, scaled as TRL scales ``loss_type``."""
        mode = "train" if self.model.training else "eval"
        mask = _loss_mask(inputs)
        ids, attn, C = _inputs(inputs)
        if "tail_keep" in inputs:  # DVP: full logits, pruned log-softmax (see the module)
            z = self._completion_logits(model, ids, attn, C)
            st = token_stats(z, inputs["completion_ids"], keep=inputs["tail_keep"],
                             temperature=self.temperature)
            logp, entropy = st["logp"], st["entropy"]
        else:
            logp, entropy, _ = self._get_per_token_logps_and_entropies(
                model, ids, attn, C, compute_entropy=True)
        logp = logp.masked_fill(~mask, 0.0)
        old = inputs.get("old_per_token_logps")
        old = logp.detach() if old is None else old
        adv = inputs["advantages"]
        adv = adv[:, None].expand_as(logp) if adv.dim() == 1 else adv
        weight = inputs.get("tail_weight")
        if self.use_vllm and self.vllm_importance_sampling_correction:  # TRL's own correction
            ratio = inputs["importance_sampling_ratio"]
            weight = ratio if weight is None else weight * ratio
        b = PolicyBatch(logp=logp, old_logp=old, roll_logp=old, mask=mask, adv=adv,
                        weight=weight, active=self._active(inputs, mode))
        loss, metrics = self.tail_spec.loss.fn(b, self.tail_hp)
        self._log(metrics)
        self._metrics[mode]["entropy"].append(masked_mean(entropy, mask))   # TRL's own key
        return self._trl_scale(loss, mask, inputs, mode)

    def _active(self, inputs: dict, mode: str) -> torch.Tensor | None:
        """Lopti: the pass of this TRL iteration (``num_iterations`` passes per generation)."""
        if "tail_passes" not in inputs or self.tail_spec.schedule is None or mode != "train":
            return None
        spg = self.args.steps_per_generation
        k = (self._step % (spg * self.num_iterations)) // spg
        return inputs["tail_passes"][:, k]

    def _trl_scale(self, loss, mask, inputs, mode: str):
        """TRL's normalisation of its ``loss_type`` across micro-batches (see the module)."""
        ga = self.current_gradient_accumulation_steps if mode == "train" else 1.0
        if self.loss_type != "dapo":
            return loss / ga
        normalizer = inputs["num_items_in_batch"].clamp(min=1.0) / self.accelerator.num_processes
        if mode == "train":
            normalizer = normalizer * ga / self.args.steps_per_generation
        return loss * mask.sum().clamp(min=1) / normalizer        # token-mean -> TRL's sum / N


def _loss_mask(batch: dict) -> torch.Tensor:
    """The completion tokens the loss sees (TRL's ``completion_mask`` times ``tool_mask``)."""
    m = batch["completion_mask"]
    if batch.get("tool_mask") is not None:
        m = m * batch["tool_mask"]
    return m.bool()


def _inputs(batch: dict):
    """``(input_ids (B, P+C), attention_mask (B, P+C), C)`` of a TRL batch."""
    ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
    attn = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
    return ids, attn, batch["completion_ids"].shape[1]


def _mismatch_metrics(b: PolicyBatch) -> dict:
    """The engine's per-token mismatch monitor: ``log_rho = log pi_train - log pi_roll``."""
    lr, m = b.log_rho.double(), b.mask
    return {"mismatch/abs_mean": masked_mean(lr.abs(), m),
            "mismatch/abs_max": float((lr.abs() * m).max()),
            "mismatch/k1": masked_mean(k1(lr), m), "mismatch/k3": masked_mean(k3(lr), m)}


__all__ = ["TailGRPOConfig", "TailGRPOTrainer", "TRL_OWNED", "LOSS_AGG_OF"]
