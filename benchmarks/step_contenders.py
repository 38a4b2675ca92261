"""The contenders of ``benchmarks/bench_step.py``: its workloads, their models, the engine's and
TRL's GRPO step, each run in its own process (its memory peak its own). The sizes and the
history of the measurements are in ``bench_step.py``'s docstring; ``--smoke`` (``SMOKE``) shrinks
them here, in every contender's process alike.
"""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import platform  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402

from bench_trl import LR, save_model, step_clock  # noqa: E402

SMOKE = os.environ.get("BENCH_STEP_SMOKE") == "1"
"""``--smoke`` (inherited by each contender's process): 2 prompts x 4 responses of 12 tokens, one
warm-up and one timed step, reports under a temporary folder: the script checked end to end
in a minute, its numbers meaning nothing."""
PROMPTS, G, MAX_NEW = (2, 4, 12) if SMOKE else (32, 8, 100)
"""Prompts per step, responses per prompt, response length (every response runs to it)."""
WARMUP, STEPS = (1, 1) if SMOKE else (1, 3)
"""Steps run before timing; steps timed (median reported)."""
TRL_MICRO = 4 if SMOKE else 64
"""TRL's ``per_device_train_batch_size``: 4 accumulation steps of 64 make one step of 256."""
TRL_SLOW_S = 60.0
"""A timed TRL step longer than this: 2 timed steps instead of ``STEPS``."""
EOS_CHANNEL, EOS_WEIGHT = 1.0, -3.0
"""Embedding channel 0 of every token, and the EOS LM-head weight on it (EOS never sampled)."""
PEAK_N, PEAK_REPEATS = 2048, 5
RESULTS = (Path(os.environ["BENCH_STEP_SMOKE_DIR"]) if SMOKE else
           Path(__file__).resolve().parent / "results")
OUT = RESULTS / "step.json"
"""``--workload fixed``'s report."""
OUT_RECIPE = RESULTS / "step_recipe.json"
"""``--workload recipe``'s report."""
RECIPE = "learn"
"""The recipe whose workload ``--workload recipe`` times (task, warm start, batch, lr)."""
OUT_TEXT = RESULTS / "step_text.json"
"""``--workload text``'s report."""
TEXT_SHAPE = dict(hidden_size=256, intermediate_size=1024, num_hidden_layers=6,
                  num_attention_heads=4, num_key_value_heads=2, vocab_size=8192,
                  max_position_embeddings=2048, rope_theta=10_000.0, rms_norm_eps=1e-6,
                  tie_word_embeddings=False, hidden_act="silu")
"""``--workload text``'s model: Qwen2-style, width 256, 6 layers, 4 query and 2 key-value heads
of 64, MLP 1,024, an untied LM head over a vocabulary of 8,192 (random weights)."""
QWEN05_CONTENDERS = ("b_micro_kv", "b_icdf_micro_kv", "c_trl")
"""``--workload qwen05`` (a GPU only): Qwen2.5-0.5B's shape (``bench_any_model.QWEN25_05B``,
V = 151,936 rows, an 8,192-id tokenizer), 150-token responses; the engine only with its
micro-batch update (the whole batch's graph of a 0.5B model at 256 x ~175 tokens, at ~30k saved
floats a token a layer, would be ~130 GB)."""
QWEN3_06B = dict(hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
                 num_attention_heads=16, num_key_value_heads=8, head_dim=128, vocab_size=151_936,
                 max_position_embeddings=40_960, rope_theta=1_000_000.0, rms_norm_eps=1e-6,
                 tie_word_embeddings=True, hidden_act="silu")
"""Qwen3-0.6B's ``config.json`` fields that decide its shape and cost (its model card): q/k
RMSNorm per head, ``head_dim`` 128 apart from width / heads = 64."""
QWEN3_CPU = dict(QWEN3_06B, hidden_size=256, intermediate_size=768, num_hidden_layers=4,
                 num_attention_heads=4, num_key_value_heads=2, vocab_size=8192,
                 max_position_embeddings=2048)
"""``--workload qwen3`` on a CPU: Qwen3-0.6B's shape scaled down (width 256, 4 layers, 4 query
and 2 key-value heads of 128: ``head_dim`` still twice width / heads; MLP 768; tied head over
8,192 rows); on a GPU the 0.6B shape itself."""
QWEN3_CONTENDERS = ("b_micro_kv", "b_icdf_micro_kv", "c_trl")
RUNG_CONTENDERS = QWEN3_CONTENDERS
"""``--workload rung``'s contenders: as ``qwen3``'s."""
"""``--workload qwen3``'s contenders: the engine with its micro-batch update, with and without the
inverse-CDF sampler, and TRL."""
TEXT_MAX_NEW = 12 if SMOKE else 150
"""``--workload text``'s response length (EOS never sampled: every response runs to it)."""
TEXT_CONTENDERS = ("b_today_kv", "b_micro_kv", "b_icdf_kv", "b_icdf_micro_kv", "c_trl")
"""The contenders ``--workload text`` runs ((a)'s whole-batch update is left out: its logits
alone are 256 x ~180 x 8,192 floats, 1.5 GB, and it is not a target; (b'') is (b) with
``update_memory="micro-batch"``: no graph kept across micro-batches; (d) and (d'') are (b) and
(b'') with ``sampler="inverse-cdf"``: one uniform a row instead of ``multinomial``'s B x V
exponentials)."""

CONTENDERS = {
    "a_prev_kv": {"label": "(a) previous engine, kv", "rollout_backend": "hf", "micro_batch": 0,
                  "rollout": "kv"},
    "b_today_kv": {"label": "(b) today's engine, kv", "rollout_backend": "fast",
                   "micro_batch": 64, "rollout": "kv"},
    "b_today_bf16": {"label": "(b') today's engine, bf16", "rollout_backend": "fast",
                     "micro_batch": 64, "rollout": "bf16"},
    "b_micro_kv": {"label": "(b'') engine, micro-batch upd.", "rollout_backend": "fast",
                   "micro_batch": 64, "rollout": "kv", "update_memory": "micro-batch"},
    "b_icdf_kv": {"label": "(d) engine, inverse-cdf sampler", "rollout_backend": "fast",
                  "micro_batch": 64, "rollout": "kv", "sampler": "inverse-cdf"},
    "b_icdf_micro_kv": {"label": "(d'') (d), micro-batch upd.", "rollout_backend": "fast",
                        "micro_batch": 64, "rollout": "kv", "sampler": "inverse-cdf",
                        "update_memory": "micro-batch"},
    "e_sdpa_icdf_kv": {"label": "(e) (d), sdpa attention", "rollout_backend": "fast",
                       "micro_batch": 64, "rollout": "kv", "sampler": "inverse-cdf",
                       "attention": "sdpa"},
    "c_trl": {"label": "(c) TRL GRPOTrainer"},
}
"""(e) is not the engine's numerics: its trainer and rollout models load with ``sdpa`` attention
(``tailtheory.core.models.ATTENTION``, ``eager`` in the engine: a reloaded model must compute
bitwise what it saved). It measures what a new engine version with both changes would gain.
Measured on the recipe workload (``results/step_recipe_sdpa.json``, two training runs on the same 2 cores): 4.12 s a
step against (b)'s 4.04 s, update 2.80 s against 2.53: nothing (the T x T scores of ~150
positions and 4 heads are small; the rollout is the fast engine's own attention either way).
It is not in the default contenders of the recipe workload for that reason."""
RECIPE_CONTENDERS = ("a_prev_kv", "b_today_kv", "c_trl")
"""The contenders ``--workload recipe`` runs."""


@dataclass(frozen=True)
class Workload:
    """What a scenario fixes: the model folder, the task, the response cap, its contenders."""

    name: str
    model_dir: Path
    task: str
    task_kwargs: dict = field(default_factory=dict)
    max_new: int = MAX_NEW
    contenders: tuple[str, ...] = tuple(CONTENDERS)
    out: Path = OUT
    own_tokenizer: bool = False
    """The model folder holds its own tokenizer, which the task speaks (``text``, ``qwen05``)."""
    device: str = "cpu"
    """Where every contender runs (``cpu``: one thread; ``cuda``)."""

    def get_task(self):
        from tailtheory.core.models import load_tokenizer
        from tailtheory.engine.tasks.task import get_task

        if not self.own_tokenizer:
            return get_task(self.task, seed=0, **self.task_kwargs)
        import transformers

        rows = transformers.AutoConfig.from_pretrained(self.model_dir).vocab_size
        return get_task(self.task, seed=0, tokenizer=load_tokenizer(self.model_dir),
                        vocab_size=rows, **self.task_kwargs)

    def config(self, run: str, steps: int, c: dict):
        """The engine's ``TrainConfig`` of contender ``c``, ``steps`` steps, run dir ``run``."""
        if self.name != "recipe":
            return engine_config(self, run, steps, c)
        from tailtheory.experiments.recipes import recipe_config

        return recipe_config(RECIPE, model=str(self.model_dir), rollout=c["rollout"],
                             rollout_backend=c["rollout_backend"], micro_batch=c["micro_batch"],
                             steps=steps, temperature=1.0, out=run, checkpoint_every=10**6,
                             eval_every=0, threads=self.threads, device=self.device,
                             update_memory=c.get("update_memory", "batch"),
                             sampler=c.get("sampler", "multinomial"))

    @property
    def threads(self) -> int:
        """torch threads of the engine: 1 on a CPU, the engine's choice elsewhere."""
        return 1 if self.device == "cpu" else 0


def make_model(folder: Path) -> tuple[Path, int, int]:
    """``bench_trl``'s model, saved with EOS never sampled; ``(folder, params, matmul params)``."""
    from tailtheory.core.models import load_lm
    from tailtheory.engine.tasks.task import get_task

    folder, n_params = save_model(folder)
    eos = get_task("kk", seed=0).eos_id
    model = load_lm(folder, device="cpu")
    with torch.no_grad():
        model.get_input_embeddings().weight[:, 0] = EOS_CHANNEL
        model.get_output_embeddings().weight[eos, 0] = EOS_WEIGHT
    model.save_pretrained(folder)
    n_matmul = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    return folder, n_params, n_matmul


def recipe_model() -> tuple[Path, int, int, dict]:
    """The ``learn`` recipe's warm start (cached; trained first if missing, ~100 s):
    ``(folder, params, matmul params, its task kwargs)``."""
    from tailtheory.core.models import load_lm, num_params
    from tailtheory.experiments.recipes import RECIPES
    from tailtheory.engine.start.sft import SFTConfig
    from tailtheory.engine.start.warm_cache import warm_start

    r = RECIPES[RECIPE]
    if (r["prompts_per_step"], r["group_size"], r["method"]) != (PROMPTS, G, "grpo"):
        raise RuntimeError(f"recipe {RECIPE!r} is no longer {PROMPTS} x {G} GRPO: {r}")
    kwargs = {"n_people": r["n_people"]}
    folder = warm_start(SFTConfig.for_task(r["task"], task_kwargs=kwargs), progress=False)
    model = load_lm(folder, device="cpu")
    n_matmul = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    return folder, num_params(model), n_matmul, kwargs


def rung_shape(name: str) -> dict:
    """``--workload rung``'s model: the model-size ladder's rung ``name``
    (``tailtheory.engine.start.rungs``: Qwen2-style, heads of 32, half as many key-value heads,
    MLP twice the width, an untied head over 4,096 ids) with random weights, its context widened
    to 2,048 positions (speed does not depend on it)."""
    from tailtheory.core.models import tiny_lm
    from tailtheory.engine.start.rungs import rung

    c = tiny_lm(rung(name).model).config
    return dict(hidden_size=c.hidden_size, intermediate_size=c.intermediate_size,
                num_hidden_layers=c.num_hidden_layers, num_attention_heads=c.num_attention_heads,
                num_key_value_heads=c.num_key_value_heads, vocab_size=c.vocab_size,
                max_position_embeddings=2048, rope_theta=10_000.0, rms_norm_eps=c.rms_norm_eps,
                tie_word_embeddings=c.tie_word_embeddings, hidden_act=c.hidden_act)


def text_model(folder: Path | None = None, shape: dict = TEXT_SHAPE,
               family: str = "qwen2") -> tuple[Path, int, int]:
    """``shape`` (:data:`TEXT_SHAPE`) with random weights beside a byte-level BPE tokenizer of
    8,192 ids trained on the Python standard library (``bench_any_model.build_checkpoint``), EOS
    never sampled as in :func:`make_model`, saved in ``folder`` (default
    ``cache/bench_<width>x<layers>``, built once, ~7 s at the text shape);
    ``(folder, params, matmul params)``."""
    from bench_any_model import build_checkpoint

    from tailtheory.core.io import cache_dir
    from tailtheory.core.models import load_lm, load_tokenizer

    tag = "" if family == "qwen2" else f"{family}_"
    folder = folder or cache_dir(f"bench_{tag}{shape['hidden_size']}x"
                                 f"{shape['num_hidden_layers']}_{shape['vocab_size']}")
    if not (folder / "config.json").exists():
        build_checkpoint(folder, shape, min(shape["vocab_size"], TEXT_SHAPE["vocab_size"]),
                         family)
        eos = load_tokenizer(folder).eos_token_id
        model = load_lm(folder, device="cpu")
        with torch.no_grad():
            model.get_input_embeddings().weight[:, 0] = EOS_CHANNEL
            model.get_output_embeddings().weight[eos, 0] = EOS_WEIGHT
        model.save_pretrained(folder)
    model = load_lm(folder, device="cpu")
    n_matmul = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    return folder, sum(p.numel() for p in model.parameters()), n_matmul


def engine_config(w: "Workload", out: str, steps: int, c: dict):
    """The engine's GRPO config of a random-model workload (``fixed``, ``text``)."""
    from tailtheory.engine.config import TrainConfig

    return TrainConfig(task=w.task, model=str(w.model_dir), method="grpo", rollout=c["rollout"],
                       rollout_backend=c["rollout_backend"], micro_batch=c["micro_batch"],
                       steps=steps, prompts_per_step=PROMPTS, group_size=G,
                       max_new_tokens=w.max_new, lr=LR, temperature=1.0, out=out,
                       update_memory=c.get("update_memory", "batch"),
                       sampler=c.get("sampler", "multinomial"), checkpoint_every=10**6, eval_every=0, threads=w.threads, device=w.device)


def bench_engine(w: Workload, c: dict) -> dict:
    """The engine's trainer, ``WARMUP + STEPS`` steps; times from its metrics lines, each row's
    response length from its rollouts."""
    from tailtheory.engine import trainer as tr
    from tailtheory.engine.checkpoint import read_metrics

    if c.get("attention"):  # this contender's own process only (in_own_process)
        from tailtheory.core import models

        models.ATTENTION = c["attention"]
    lens, widths, rollout = [], [], tr.rollout_step

    def recorded(*args, **kw):
        problems, rb, group_ids = rollout(*args, **kw)
        lens.append(rb.mask.sum(-1))
        widths.append(rb.response.shape[1])
        return problems, rb, group_ids

    tr.rollout_step = recorded
    try:
        with tempfile.TemporaryDirectory() as run:
            tr.train(w.config(run, WARMUP + STEPS, c), progress=False)
            lines = read_metrics(run)[WARMUP:]
    finally:
        tr.rollout_step = rollout
    lens = [x.tolist() for x in lens[WARMUP:]]
    if [sum(x) for x in lens] != [m["rollout/tokens"] for m in lines]:
        raise RuntimeError("recorded response lengths disagree with the metrics' token counts")
    return {**summary([m["time/step_s"] for m in lines], [m["time/rollout_s"] for m in lines],
                      [sum(x) for x in lens]),
            **length_stats(lens, widths[WARMUP:], w.max_new), "_lens": lens}


def step_problems(n_steps: int, w: Workload):
    """The problems of the engine's steps ``0 .. n_steps - 1`` (seed 0), in its order."""
    from tailtheory.engine.trainer import PROBLEM_SEED

    task = w.get_task()
    return task, [task.problems(PROMPTS, seed=PROBLEM_SEED + s) for s in range(n_steps)]


def bench_trl(w: Workload) -> dict:
    """TRL's ``GRPOTrainer`` on the same model, tokenizer, prompts and shapes."""
    import trl
    from datasets import Dataset
    from transformers import AutoModelForCausalLM

    from tailtheory.engine.tasks.task import Problem

    task, steps = step_problems(WARMUP + STEPS, w)
    problems = [p for s in steps for p in s]
    data = Dataset.from_dict({"prompt": [task.decode(p.prompt_ids) for p in problems],
                              "answer": [p.answer for p in problems]})

    def reward(completions, answer, **_):
        return [float(c.split("<eos>")[0].strip() == a) for c, a in zip(completions, answer)]

    def task_reward(completion_ids, answer, **_):  # the engine's reward, on the sampled ids
        return [task.reward(Problem([], a), ids).total for ids, a in zip(completion_ids, answer)]

    clock, gen_s, seen = step_clock(stop_after=WARMUP + 2, slow_s=TRL_SLOW_S), [], []
    with tempfile.TemporaryDirectory() as out:
        cfg = trl.GRPOConfig(output_dir=out, per_device_train_batch_size=TRL_MICRO,
                             gradient_accumulation_steps=PROMPTS * G // TRL_MICRO,
                             num_generations=G, max_completion_length=w.max_new,
                             max_steps=WARMUP + STEPS, learning_rate=LR, beta=0.0,
                             loss_type="dapo", epsilon=0.2, epsilon_high=0.24, temperature=1.0,
                             use_cpu=w.device == "cpu", report_to=[], logging_steps=1, save_strategy="no",
                             gradient_checkpointing=False, disable_tqdm=True, seed=0,
                             bf16=False, dataloader_num_workers=0, shuffle_dataset=False)
        model = AutoModelForCausalLM.from_pretrained(w.model_dir, dtype=torch.float32)
        trainer = trl.GRPOTrainer(model=model, args=cfg, train_dataset=data,
                                  reward_funcs=reward if w.name == "fixed" else task_reward,
                                  processing_class=task.tokenizer, callbacks=[clock])
        generate = trainer._generate_single_turn

        def timed_generate(prompt_ids, *args, **kw):
            t0 = time.perf_counter()
            try:
                out = generate(prompt_ids, *args, **kw)
            finally:
                gen_s.append(time.perf_counter() - t0)
            seen.append(([list(map(int, p)) for p in prompt_ids], [len(c) for c in out[0]]))
            return out

        trainer._generate_single_turn = timed_generate
        assert cfg.generation_batch_size == PROMPTS * G, cfg.generation_batch_size
        trainer.train()
        logs = [h for h in trainer.state.log_history if "completions/mean_length" in h]
        attn = model.config._attn_implementation
    if len(gen_s) != len(clock.t):
        raise RuntimeError(f"{len(gen_s)} generations in {len(clock.t)} steps: expected one each")
    for s, (prompt_ids, _) in enumerate(seen):  # the engine's prompts, in its order
        if prompt_ids != [p.prompt_ids for p in steps[s] for _ in range(G)]:
            raise RuntimeError(f"TRL's step {s} prompts differ from the engine's")
    lens = [x for _, x in seen]
    logged = [h["completions/mean_length"] * PROMPTS * G for h in logs]
    if any(abs(sum(x) - t) > 0.5 for x, t in zip(lens, logged)):
        raise RuntimeError(f"recorded token counts {[sum(x) for x in lens]} != logged {logged}")
    lens = lens[WARMUP:]
    return {**summary(clock.t[WARMUP:], gen_s[WARMUP:], [sum(x) for x in lens]),
            **length_stats(lens, [max(x) for x in lens], w.max_new), "_lens": lens,
            "trl_version": trl.__version__, "attention": attn,
            "per_device_train_batch_size": TRL_MICRO,
            "gradient_accumulation_steps": cfg.gradient_accumulation_steps,
            "generation_batch_size": cfg.generation_batch_size}


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``; ``platform.processor()`` elsewhere)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def rss_mb() -> float | None:
    """This process's resident set now, in MB (Linux ``/proc``; None elsewhere)."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
    except (OSError, IndexError, ValueError):
        return None
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def run_contender(w: Workload, name: str) -> dict:
    """Contender ``name`` on ``w``, in the process that calls it (:func:`in_own_process` gives
    it a fresh one): its times and lengths, with its peak resident set (``ru_maxrss``) and the
    resident set before it started (torch, transformers and TRL imported)."""
    import resource

    import trl  # noqa: F401 (imported before the baseline, by every contender alike)

    if w.device == "cpu":
        torch.set_num_threads(1)
    else:
        torch.cuda.reset_peak_memory_stats()
    before = rss_mb()
    r = bench_trl(w) if name == "c_trl" else bench_engine(w, CONTENDERS[name])
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KB on Linux
    gpu = {} if w.device == "cpu" else {"peak_gpu_mb": torch.cuda.max_memory_allocated() / 2**20}
    return {**r, "rss_before_mb": before, "peak_rss_mb": peak,
            "peak_growth_mb": None if before is None else peak - before, **gpu}


def in_own_process(w: Workload, name: str) -> dict:
    """:func:`run_contender` in a fresh spawned process, so that each contender's memory peak
    is its own (a process's peak only grows)."""
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(max_workers=1, mp_context=mp.get_context("spawn")) as pool:
        return pool.submit(run_contender, w, name).result()


def summary(step_s: list[float], rollout_s: list[float], tokens: list[float]) -> dict:
    """Medians of the timed steps; tokens/s of the step, its rollout and its update."""
    update_s = [s - r for s, r in zip(step_s, rollout_s)]
    tok = statistics.mean(tokens)
    med = {k: statistics.median(v) for k, v in
           (("step", step_s), ("rollout", rollout_s), ("update", update_s))}
    return {"step_s_median": med["step"], "rollout_s_median": med["rollout"],
            "update_s_median": med["update"], "tokens_per_step": tok,
            "tokens_per_s": tok / med["step"], "rollout_tokens_per_s": tok / med["rollout"],
            "update_tokens_per_s": tok / med["update"], "timed_steps": len(step_s),
            "step_s": step_s, "rollout_s": rollout_s, "tokens": tokens}


def length_stats(lens: list[list[int]], widths: list[int], cap: int) -> dict:
    """Response lengths (EOS included) of the timed steps, the decode steps each rollout ran
    (the width of its response tensor: its longest row) and the rows that reached ``cap``."""
    flat = [n for x in lens for n in x]
    return {"len_mean": statistics.mean(flat), "len_min": min(flat), "len_max": max(flat),
            "len_max_per_step": [max(x) for x in lens], "decode_steps": widths,
            "at_cap": sum(n >= cap for n in flat)}
