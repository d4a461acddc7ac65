"""The embedded tiny model (``hwprobe/tiny``) and the code that trains and measures it."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

pytestmark = pytest.mark.torch

SIZE_CAP_BYTES = 25 * 1024 * 1024


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """One torch thread: on a busy 2-core machine two threads mostly wait for each other."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# --- the shipped checkpoint ----------------------------------------------------------------


@pytest.fixture(scope="module")
def shipped():
    import hwprobe.tiny as tiny

    return tiny.training_manifest()


@pytest.fixture(scope="module")
def shipped_data(shipped):
    """The held-out and training streams, re-encoded with the shipped tokenizer."""
    from transformers import PreTrainedTokenizerFast

    import hwprobe.tiny as tiny
    from hwprobe.training.data import prepare
    from hwprobe.training.report import plan_from_dict

    plan = plan_from_dict(shipped["plan"])
    tok = PreTrainedTokenizerFast.from_pretrained(tiny.target_dir())
    return plan, prepare(plan, tokenizer=tok)


def test_dirs_resolve_and_hold_a_complete_checkpoint():
    import hwprobe.tiny as tiny

    for d in (tiny.target_dir(), tiny.drafter_dir()):
        for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"):
            assert (d / name).is_file(), d / name


def test_missing_checkpoint_is_a_clear_error(tmp_path, monkeypatch):
    import hwprobe.tiny as tiny

    monkeypatch.setattr(tiny, "MODEL_DIR", tmp_path)
    with pytest.raises(tiny.TinyModelMissing, match="tiny target is missing.*train_tiny"):
        tiny.target_dir()
    (tmp_path / "drafter").mkdir()
    (tmp_path / "drafter" / "config.json").write_text("{}")
    with pytest.raises(FileNotFoundError, match="model.safetensors, tokenizer.json"):
        tiny.drafter_dir()


def test_shipped_files_fit_the_size_cap():
    import hwprobe.tiny as tiny

    total = sum(f.stat().st_size for f in tiny.MODEL_DIR.parent.rglob("*")
                if f.is_file() and "__pycache__" not in f.parts)
    assert total <= SIZE_CAP_BYTES, f"{total / 1e6:.1f} MB"


def test_checkpoint_loads_with_promised_shapes(shipped):
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast, Qwen3ForCausalLM, Qwen3MoeForCausalLM

    import hwprobe.tiny as tiny
    from hwprobe.training.plans import PLANS

    plan = PLANS["tiny"]
    assert shipped["plan_name"] == "tiny"
    target = AutoModelForCausalLM.from_pretrained(tiny.target_dir())
    drafter = AutoModelForCausalLM.from_pretrained(tiny.drafter_dir())
    assert isinstance(target, Qwen3MoeForCausalLM) and isinstance(drafter, Qwen3ForCausalLM)
    c = target.config
    assert (c.num_hidden_layers, c.hidden_size, c.num_experts, c.num_experts_per_tok, c.moe_intermediate_size) == (
        plan.target.num_hidden_layers, plan.target.hidden_size, plan.target.num_experts,
        plan.target.num_experts_per_tok, plan.target.moe_intermediate_size)
    assert c.mlp_only_layers == [] and c.decoder_sparse_step == 1   # every layer is MoE
    experts = target.model.layers[0].mlp.experts
    assert tuple(experts.gate_up_proj.shape) == (c.num_experts, 2 * c.moe_intermediate_size, c.hidden_size)
    assert tuple(experts.down_proj.shape) == (c.num_experts, c.hidden_size, c.moe_intermediate_size)
    tok_t = PreTrainedTokenizerFast.from_pretrained(tiny.target_dir())
    assert len(tok_t) == c.vocab_size == drafter.config.vocab_size == plan.vocab_size
    assert (tiny.target_dir() / "tokenizer.json").read_bytes() == (tiny.drafter_dir() / "tokenizer.json").read_bytes()
    assert tok_t.eos_token_id == c.eos_token_id == drafter.config.eos_token_id
    text = "def main(argv=None):\n    return 0\n"
    assert tok_t.decode(tok_t(text)["input_ids"]) == text


def test_reproduces_recorded_heldout_loss(shipped, shipped_data):
    from transformers import AutoModelForCausalLM

    import hwprobe.tiny as tiny
    from hwprobe.training.losses import lm_loss

    plan, data = shipped_data
    assert len(data.heldout) == shipped["heldout_tokens"]
    check = data.heldout_windows(plan.check_windows)
    for kind, d in (("target", tiny.target_dir()), ("drafter", tiny.drafter_dir())):
        model = AutoModelForCausalLM.from_pretrained(d)
        assert lm_loss(model, check) == pytest.approx(shipped[kind]["check_ce"], abs=5e-4), kind


def test_learned_far_below_the_unigram_baseline(shipped, shipped_data):
    from hwprobe.training.losses import unigram_loss

    plan, data = shipped_data
    unigram = unigram_loss(data.train, data.heldout, plan.vocab_size)
    assert unigram == pytest.approx(shipped["unigram_heldout_ce"], rel=1e-9)
    # A wide margin: at least 2 nats/token (over 7x in perplexity) below the unigram model.
    assert shipped["target"]["heldout_ce"] < unigram - 2.0
    assert shipped["drafter"]["heldout_ce"] < unigram - 1.5
    assert shipped["target"]["heldout_ce"] < shipped["drafter"]["heldout_ce"]


# --- the training code -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def smoke_runs(tmp_path_factory):
    from hwprobe.training.train_tiny import train

    root = tmp_path_factory.mktemp("smoke")
    runs = {}
    for name, seed in (("a", 0), ("b", 0), ("c", 1)):
        train(root / name, plan_name="smoke", seed=seed, minutes=5, threads=1)
        runs[name] = root / name
    return runs


def _tensors(folder):
    from safetensors.numpy import load_file

    return load_file(folder / "model.safetensors")


def test_short_training_is_deterministic_by_seed(smoke_runs):
    for kind in ("target", "drafter"):
        a, b, c = (_tensors(smoke_runs[r] / kind) for r in "abc")
        assert a.keys() == b.keys() == c.keys()
        assert all(np.array_equal(a[k], b[k]) for k in a), kind
        assert not all(np.array_equal(a[k], c[k]) for k in a), kind
    log_a = json.loads((smoke_runs["a"] / "training_log.json").read_text())
    log_b = json.loads((smoke_runs["b"] / "training_log.json").read_text())
    strip = lambda rows: [{k: v for k, v in r.items() if k != "elapsed_s"} for r in rows]  # noqa: E731
    assert strip(log_a["target"]) == strip(log_b["target"])
    assert (smoke_runs["a"] / "target" / "tokenizer.json").read_bytes() == \
        (smoke_runs["c"] / "target" / "tokenizer.json").read_bytes()


def test_training_writes_a_loadable_folder(smoke_runs):
    from transformers import AutoModelForCausalLM

    out = smoke_runs["a"]
    m = json.loads((out / "manifest.json").read_text())
    assert m["target"]["steps_done"] == 4 and m["drafter"]["steps_done"] == 3
    assert not m["target"]["truncated"]
    assert (out / "loss_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    model = AutoModelForCausalLM.from_pretrained(out / "target")
    assert model.config.num_experts == 4
    assert not [p for p in out.parent.iterdir() if p.name.startswith(".")]  # no temp folders left


def test_cli_rejects_bad_input_without_touching_files(tmp_path, capsys):
    from hwprobe.training.train_tiny import main

    keep = tmp_path / "notes"
    keep.mkdir()
    (keep / "a.txt").write_text("mine")
    assert main(["--out", str(keep), "--plan", "smoke", "--quiet"]) == 2
    assert "not a tiny-model folder" in capsys.readouterr().err
    assert (keep / "a.txt").read_text() == "mine"
    assert main(["--out", str(tmp_path / "x"), "--minutes", "0", "--quiet"]) == 2
    assert not (tmp_path / "x").exists()


def test_a_logged_schedule_is_replayed_step_for_step(smoke_runs, tmp_path, capsys):
    """A run's own log reproduces its weights bit for bit; an edited log is followed exactly."""
    from hwprobe.training.train_tiny import main, train

    log = smoke_runs["a"] / "training_log.json"
    train(tmp_path / "same", plan_name="smoke", seed=0, threads=1, schedule_from=log)
    for kind in ("target", "drafter"):
        a, r = _tensors(smoke_runs["a"] / kind), _tensors(tmp_path / "same" / kind)
        assert all(np.array_equal(a[k], r[k]) for k in a), kind
    edited = json.loads(log.read_text())
    edited["target"] = [dict(row, lr=row["lr"] / 2) for row in edited["target"][:3]]
    (tmp_path / "edited.json").write_text(json.dumps(edited))
    m = train(tmp_path / "edited", plan_name="smoke", seed=0, threads=1, schedule_from=tmp_path / "edited.json")
    rows = json.loads((tmp_path / "edited" / "training_log.json").read_text())["target"]
    assert [r["lr"] for r in rows] == [r["lr"] for r in edited["target"]]
    assert m["target"]["steps_done"] == 3 and m["schedule"].startswith("replayed from")
    bad = tmp_path / "bad.json"
    bad.write_text('{"target": []}')
    for path in (bad, tmp_path / "missing.json"):
        assert main(["--out", str(tmp_path / "x"), "--plan", "smoke", "--schedule-from", str(path),
                     "--quiet"]) == 2
        assert "train_tiny: error:" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_schedule_warms_up_holds_and_decays():
    from hwprobe.training.plans import PLANS
    from hwprobe.training.train_tiny import WarmupStableDecay

    plan = PLANS["tiny"]
    s = WarmupStableDecay(plan, 100, start=0.0, deadline=1e9)
    lrs = [s.lr(i, now=float(i)) for i in range(100)]
    assert lrs[0] < lrs[4] == pytest.approx(plan.lr)            # 5 warm-up steps
    assert lrs[50] == plan.lr and lrs[79] == plan.lr
    assert np.all(np.diff(lrs[80:]) < 0)
    assert lrs[-1] == pytest.approx(plan.lr * plan.final_lr_frac)
    assert not s.cut_short
    # One second per step but 50 s of budget: the decay starts when 20 % of it is left,
    # sized to the 10 s that remain.
    s = WarmupStableDecay(plan, 100, start=0.0, deadline=50.0)
    lrs = [s.lr(i, now=float(i)) for i in range(s.steps) if i < s.end]
    assert s.cut_short and s.decay_from == 41 and s.end == 50
    assert lrs[-1] == pytest.approx(plan.lr * plan.final_lr_frac)


# --- the corpus ------------------------------------------------------------------------------


def test_corpus_matches_its_manifest_and_split_is_by_file():
    from hwprobe.training.corpus import load_documents, load_manifest, split_documents

    docs = load_documents()
    manifest = load_manifest()
    assert [d.path for d in docs] == [f["path"] for f in manifest["files"]]
    train, held = split_documents(docs)
    assert {d.path for d in train}.isdisjoint(d.path for d in held)
    assert 0.02 < sum(len(d.text) for d in held) / sum(len(d.text) for d in docs) < 0.2
    assert [d.heldout for d in docs] == [f["heldout"] for f in manifest["files"]]


def test_corrupt_corpus_fails_clearly(tmp_path):
    import lzma

    from hwprobe.training import corpus

    data = lzma.decompress(corpus.TEXT_PATH.read_bytes())
    bad = tmp_path / "stdlib.txt.xz"
    bad.write_bytes(lzma.compress(data.replace(b"def ", b"def  ", 1), preset=0))
    with pytest.raises(corpus.CorpusError, match="does not match"):
        corpus.load_documents(text_path=bad)
    with pytest.raises(corpus.CorpusError, match="corpus text missing"):
        corpus.load_documents(text_path=tmp_path / "absent.xz")


def test_rebuild_from_a_differing_stdlib_names_the_file(tmp_path):
    from hwprobe.training import corpus

    first = corpus.load_manifest()["files"][0]["path"]
    (tmp_path / first).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / first).write_text("# not the pinned text\n")
    before = corpus.TEXT_PATH.stat().st_mtime_ns
    with pytest.raises(corpus.CorpusError, match=f"{first}: differs from the pinned corpus"):
        corpus.build(tmp_path)
    assert corpus.TEXT_PATH.stat().st_mtime_ns == before


# --- routing statistics and draft agreement ----------------------------------------------------


def _brute_union(topk, t):
    w, T, _ = topk.shape
    return np.mean([len(set(topk[i, s : s + t].ravel())) for i in range(w) for s in range(T - t + 1)])


@given(st.integers(0, 10_000), st.integers(2, 9), st.integers(1, 3))
def test_layer_stats_match_brute_force(seed, n_experts, k):
    from hwprobe.training.routing_stats import layer_stats

    k = min(k, n_experts)
    rng = np.random.default_rng(seed)
    w, T = 3, 10
    topk = np.stack([rng.permutation(n_experts)[:k] for _ in range(w * T)]).reshape(w, T, k)
    s = layer_stats(topk, n_experts, np.random.default_rng(0), spans=(1, 2, 4, 8))
    reuse = np.mean([len(set(topk[i, j]) & set(topk[i, j + 1])) / k for i in range(w) for j in range(T - 1)])
    assert s["reuse"] == pytest.approx(reuse)
    for t in (1, 2, 4, 8):
        assert s["union_consecutive"][t] == pytest.approx(_brute_union(topk, t))
        assert k <= s["union_random_positions"][t] <= min(n_experts, k * t)
    counts = np.bincount(topk.ravel(), minlength=n_experts) / topk.size
    nz = counts[counts > 0]
    assert s["entropy"] == pytest.approx(-(nz * np.log(nz)).sum() / np.log(n_experts))


def test_layer_stats_extremes():
    from hwprobe.training.routing_stats import independent_union, layer_stats

    same = np.tile(np.array([1, 5]), (2, 16, 1))                 # every token routes to {1, 5}
    s = layer_stats(same, 8, np.random.default_rng(0))
    assert s["reuse"] == 1.0 and s["union_consecutive"][16] == 2.0 and s["top_eighth_share"] == 0.5
    assert independent_union(32, 4, 1) == pytest.approx(4.0)
    assert independent_union(32, 4, 1000) == pytest.approx(32.0)


def test_draft_agreement_of_a_model_with_itself_is_total(smoke_runs):
    from transformers import AutoModelForCausalLM

    from hwprobe.training.draft_agreement import draft_agreement

    target = AutoModelForCausalLM.from_pretrained(smoke_runs["a"] / "target")
    drafter = AutoModelForCausalLM.from_pretrained(smoke_runs["a"] / "drafter")
    windows = np.random.default_rng(0).integers(0, 300, size=(6, 24))
    same = draft_agreement(target, target, windows, prefix_len=12, depth=5, batch_size=4)
    assert same["p_accept"] == [1.0] * 5 and same["alpha"] == [1.0] * 5
    assert same["mean_accepted"] == 5.0 and same["teacher_forced_top1"] == 1.0
    other = draft_agreement(target, drafter, windows, prefix_len=12, depth=5, batch_size=4)
    p = np.array(other["p_accept"])
    assert np.all(np.diff(p) <= 0) and other["mean_accepted"] == pytest.approx(p.sum())


def test_smoke_report_renders(smoke_runs, tmp_path):
    from hwprobe.training.report import write_report

    model_dir = tmp_path / "m"
    shutil.copytree(smoke_runs["a"], model_dir)
    out = write_report(model_dir, tmp_path / "r" / "tiny.md", threads=1)
    text = out.read_text()
    assert "## Held-out loss" in text and "| mean |" in text and "α_j" in text
    assert (tmp_path / "r" / "tiny" / "union_growth.png").is_file()
