"""What a run starts from (``tailtheory/engine/load.py``): a folder that cannot serve is one line
before ``--out`` is touched, and a run's identity is what the folder holds (the run cache's key,
``--resume``).

Checkpoints come from ``tests/checkpoints.py`` (a Qwen2-style model with a byte-level BPE of 4,096
ids, EOS = pad = ``<|endoftext|>``, no BOS).
"""

from __future__ import annotations

import pytest

from tailtheory.cli import main
from tailtheory.core.models import checkpoint_fingerprint, tiny_lm
from tailtheory.engine import trainer
from tailtheory.engine import load as start
from tailtheory.engine.config import TrainConfig
from tailtheory.engine.tasks.tokenizer import build_tokenizer
from tailtheory.engine.load import read_provenance
from tailtheory.engine.checkpoint import read_metrics
from tests.checkpoints import bpe_tokenizer, user_checkpoint

FLAGS = ["--task", "kk", "--n-people", "2", "--prompts-per-step", "2", "--group-size", "2",
         "--device", "cpu", "--quiet"]


def _train(folder, out, *extra) -> int:
    return main(["train", "--model", str(folder), *FLAGS, "--out", str(out), *extra])


# --- bad folders: one line, before --out is touched ------------------------------------------

def _no_tokenizer(path):
    tiny_lm(vocab_size=512, hidden=16, layers=1, heads=2, kv_heads=1).save_pretrained(path)


def _unknown_words(path):
    tok = build_tokenizer(64, words=("a", "b"))         # the task's words all become <unk>
    tiny_lm(vocab_size=64, hidden=16, layers=1, heads=2, kv_heads=1).save_pretrained(path)
    tok.save_pretrained(path)


def _longer_than_the_model(path):
    user_checkpoint(path, model_vocab=1024, hidden=16, layers=1)


def _no_eos(path):
    from transformers import PreTrainedTokenizerFast

    bpe = bpe_tokenizer(4096)
    tok = PreTrainedTokenizerFast(tokenizer_object=bpe.backend_tokenizer, pad_token="<|endoftext|>")
    tiny_lm(vocab_size=4096, hidden=16, layers=1, heads=2, kv_heads=1).save_pretrained(path)
    tok.save_pretrained(path)


def _gpt2(path):
    from transformers import AutoModelForCausalLM, GPT2Config

    cfg = GPT2Config(vocab_size=4096, n_embd=16, n_layer=1, n_head=2, n_positions=64,
                     bos_token_id=0, eos_token_id=0)
    AutoModelForCausalLM.from_config(cfg).save_pretrained(path)
    bpe_tokenizer(4096).save_pretrained(path)


BAD = {"no tokenizer": (_no_tokenizer, "save its tokenizer beside it: tokenizer.save_pretrained("),
       "unknown words": (_unknown_words, "cannot write 35 of the tasks' 35 words"),
       "longer than the model": (_longer_than_the_model,
                                 "4,096 tokens, more than the model's vocabulary of 1,024"),
       "no EOS": (_no_eos, "has no EOS token"),
       "gpt2 on fast": (_gpt2, "pass --rollout-backend hf")}


@pytest.mark.parametrize("bad", sorted(BAD))
def test_a_bad_checkpoint_is_one_line_and_out_is_untouched(bad, tmp_path, capsys):
    """A folder without a tokenizer, a tokenizer that cannot write the task's words, one longer
    than the model's vocabulary or without EOS, an architecture the ``fast`` engine cannot run:
    one line (exit 2) naming the fix, and nothing written to ``--out``."""
    make, message = BAD[bad]
    folder, out = tmp_path / "model", tmp_path / "run"
    make(folder)
    capsys.readouterr()
    assert _train(folder, out, "--steps", "1", "--eval-every", "0") == 2
    err = capsys.readouterr().err
    assert err.startswith("tailtheory: ") and err.count("\n") == 1 and "Traceback" not in err
    assert message in err, err
    assert not out.exists()


def test_gpt2_trains_on_the_hf_backend_it_is_pointed_to(tmp_path):
    """The fix the refusal names works: ``--rollout-backend hf`` samples with the model's own
    forward."""
    _gpt2(tmp_path / "model")
    out = tmp_path / "run"
    assert _train(tmp_path / "model", out, "--steps", "1", "--eval-every", "0",
                  "--rollout-backend", "hf") == 0
    assert len(read_metrics(out)) == 1


def test_a_warm_start_folder_speaks_the_word_level_task(tmp_path):
    """``--model`` on a folder the toolkit saved (a warm start's: a Qwen2 model beside its
    word-level tokenizer) gives the task ``--model warm`` gives: the same prompt ids."""
    folder = tmp_path / "warm"
    tiny_lm(vocab_size=512, hidden=16, layers=1, heads=2, kv_heads=1).save_pretrained(folder)
    build_tokenizer(512).save_pretrained(folder)
    cfg = TrainConfig(model=str(folder), task="kk_trace", n_people=2)
    assert start.from_folder(cfg) and not start.from_folder(TrainConfig(model="warm"))
    model, task = start.load_start(cfg)
    built = start.load_task(cfg)
    assert model.config.vocab_size == task.vocab_size == 512 and not task.chat
    assert [p.prompt_ids for p in task.problems(8)] == [p.prompt_ids for p in built.problems(8)]
    assert task.max_response_len == built.max_response_len == 92


# --- the run's identity is what the folder holds ---------------------------------------------

def test_run_key_and_resume_follow_what_the_folder_holds(tmp_path, capsys, monkeypatch):
    """The run cache keys on the folder's weights and tokenizer, not only its path. A run that
    failed before its first checkpoint is continued with ``--resume`` after the folder was
    fixed (its provenance recorded anew); a run with a checkpoint whose folder now holds
    another model is refused, one line, nothing written."""
    from tailtheory.experiments.runs import run_key

    folder, out = tmp_path / "model", tmp_path / "run"
    user_checkpoint(folder, hidden=16, layers=1)
    cfg = TrainConfig(model=str(folder), task="kk", device="cpu")
    key = run_key(cfg)
    user_checkpoint(folder, hidden=16, layers=1, seed=1)                  # other weights
    assert run_key(cfg) != key
    key = run_key(cfg)
    (folder / "chat_template.jinja").write_text("{{ messages[0]['content'] }}")  # other text
    assert run_key(cfg) != key
    (folder / "chat_template.jinja").unlink()

    def boom(*a, **kw):
        raise ValueError("failed at step 0")
    monkeypatch.setattr(trainer, "train_step", boom)
    assert _train(folder, out, "--steps", "2", "--eval-every", "0") == 2
    assert (out / "config.json").exists() and not (out / "metrics.jsonl").exists()
    monkeypatch.undo()
    user_checkpoint(folder, hidden=16, layers=1, seed=2)                  # the user's fix
    assert _train(folder, out, "--steps", "2", "--eval-every", "0") == 2  # refused: a run
    assert "pass --resume" in capsys.readouterr().err
    assert _train(folder, out, "--steps", "2", "--eval-every", "0", "--resume") == 0
    assert read_provenance(out)["checkpoint"] == checkpoint_fingerprint(folder)
    user_checkpoint(folder, hidden=16, layers=1, seed=3)                  # replaced under it
    before = {f.name: f.read_bytes() for f in out.iterdir() if f.is_file()}
    capsys.readouterr()
    assert _train(folder, out, "--steps", "3", "--eval-every", "0", "--resume") == 2
    err = capsys.readouterr().err
    assert "now holds another one" in err and err.count("\n") == 1
    after = {f.name: f.read_bytes() for f in out.iterdir() if f.is_file()}
    assert {k: v for k, v in after.items() if not k.startswith(".tailtheory")} == \
        {k: v for k, v in before.items() if not k.startswith(".tailtheory")}


def test_a_copy_of_the_folder_is_read_in_its_place_and_recorded_as_the_folder(tmp_path):
    """A :class:`~tailtheory.engine.load.FolderCopy` (a study's worker): the model and task
    come from the copy, the path named by ``cfg.model`` is never read, and the run's record
    names the folder copied and its fingerprint, as a run from the folder itself does."""
    import shutil

    folder = tmp_path / "model"
    tiny_lm(vocab_size=512, hidden=16, layers=1, heads=2, kv_heads=1).save_pretrained(folder)
    build_tokenizer(512).save_pretrained(folder)
    cfg = TrainConfig(model=str(folder), task="kk_trace", n_people=2)
    model, _ = start.load_start(cfg)
    (tmp_path / "direct").mkdir()
    direct = start.record_provenance(tmp_path / "direct", cfg, model, resume=False)
    copy = start.FolderCopy(tmp_path / "copy", str(folder.resolve()))
    shutil.copytree(folder, copy.here)
    shutil.rmtree(folder)                                   # only the copy is there to read
    again, task = start.load_start(cfg, copy=copy)
    assert all((a == b).all() for a, b in zip(model.parameters(), again.parameters()))
    assert task.vocab_size == 512 and start.start_key(cfg, copy) == f"path:{folder.resolve()}"
    (tmp_path / "copied").mkdir()
    recorded = start.record_provenance(tmp_path / "copied", cfg, again, resume=False, copy=copy)
    assert recorded == direct and recorded["checkpoint"] == checkpoint_fingerprint(copy.here)
