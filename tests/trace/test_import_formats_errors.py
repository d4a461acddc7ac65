"""Bad logs in the tools' layouts: one line saying what is wrong, exit 2, nothing written."""

from __future__ import annotations

import contextlib
import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from import_formats_helpers import (
    random_truth,
    refused,
    write_llama_csv,
    write_llama_moe_trace,
    write_megatron,
)

from simmoe.errors import SimmoeError
from simmoe.trace.importer import import_routes
from simmoe.trace.importer_common import GeometryMismatch

FIXTURES = Path(__file__).resolve().parent / "fixtures"
IDS = [1, 2, 4]


@pytest.fixture
def truth():
    return random_truth(np.random.default_rng(7), requests=2, L=3, N=16, k=2, prompt=(4, 4), output=(2, 3))


def _lines(path):
    return path.read_text().splitlines(keepends=True)


def test_a_missing_experts_column_is_named_even_with_a_model(tmp_path, capsys):
    log = tmp_path / "log.jsonl"
    log.write_text("".join(json.dumps({"request_id": 0, "token_idx": t, "layer": 0, "ids": [1, 2]}) + "\n"
                           for t in range(3)))
    line = refused(tmp_path, capsys, [log, "--out", tmp_path / "t.parquet", "--model", "olmoe-1b-7b"],
                   "field 'experts': missing column (columns are: request_id, token_idx, layer, ids")
    assert "disagrees" not in line


def test_a_forced_warp_layout_names_its_missing_field(tmp_path, capsys):
    log = tmp_path / "log.jsonl"
    log.write_text('{"tok": 0, "experts_per_layer": [[1, 2]]}\n')
    refused(tmp_path, capsys, [log, "--format", "warp", "--out", tmp_path / "t.parquet"],
            "field 'layers': missing field (a warp trace has one {\"tok\": n, \"layers\"")


@pytest.mark.parametrize("writer, name, cut, message", [
    (write_llama_csv, "l.csv", 2, "forward 0: layer 1 has 3 tokens but layer 2 has 4"),
    (write_llama_moe_trace, "m.csv", 3, "forward 0: layer 1 has 3 tokens but layer 2 has 4"),
])
def test_llama_layers_of_one_forward_with_other_token_counts(tmp_path, capsys, truth, writer, name, cut, message):
    path = writer(truth, tmp_path / name, IDS)
    lines = _lines(path)
    del lines[cut : cut + (1 if writer is write_llama_csv else 2)]  # one token of layer 1 in the prefill
    path.write_text("".join(lines))
    refused(tmp_path, capsys, [path, "--out", tmp_path / "t.parquet"], message,
            "dropped or renumbered in some layers only")


def test_megatron_step_with_layers_of_other_token_counts(tmp_path, capsys, truth):
    path = write_megatron(truth, tmp_path / "router_trace_rank0.jsonl", IDS)
    lines = _lines(path)
    rec = json.loads(lines[1])
    rec["top_indices"] = rec["top_indices"][:-1]
    lines[1] = json.dumps(rec) + "\n"
    path.write_text("".join(lines))
    refused(tmp_path, capsys, [path, "--out", tmp_path / "t.parquet"],
            "row 0, field 'top_indices': step 0: layer 2 has 3 tokens but layer 1 has 4")


def test_megatron_records_of_two_ranks(tmp_path, capsys, truth):
    path = write_megatron(truth, tmp_path / "r.jsonl", IDS)
    lines = _lines(path)
    lines[-1] = lines[-1].replace('"rank": 0', '"rank": 1')
    path.write_text("".join(lines))
    refused(tmp_path, capsys, [path, "--out", tmp_path / "t.parquet"], "records of ranks 0 and 1")


def test_megatron_forced_on_a_file_without_its_fields(tmp_path, capsys):
    path = tmp_path / "r.jsonl"
    path.write_text('{"step": 0, "layer": 1, "indices": [[1, 2]]}\n')
    refused(tmp_path, capsys, [path, "--format", "megatron", "--out", tmp_path / "t.parquet"],
            "field 'top_indices': missing field")


def test_a_log_without_a_single_token_forward_is_not_split_into_requests(tmp_path, capsys):
    truth = random_truth(np.random.default_rng(1), requests=1, L=2, N=8, k=2, prompt=(5, 5), output=(2, 2))
    batched = [("b", truth[0][1], truth[0][2][:0])]  # prompts only: every forward has 5 tokens
    path = write_llama_csv(batched, tmp_path / "b.csv", [0, 1])
    refused(tmp_path, capsys, [path, "--out", tmp_path / "t.parquet"], "no forward of a single token",
            "one request at a time (batch 1)")


def test_a_moe_trace_run_that_is_not_whole_tokens(tmp_path, capsys, truth):
    path = write_llama_moe_trace(truth, tmp_path / "m.csv", IDS)
    refused(tmp_path, capsys, [path, "--top-k", "3", "--out", tmp_path / "t.parquet"],
            "layer 1 has a run of 8 rows, not a multiple of --top-k 3")


def test_flame_layers_with_other_token_counts(tmp_path, capsys):
    folder = shutil.copytree(FIXTURES / "flame_iter_0001", tmp_path / "iter")
    t = pq.read_table(folder / "layer_04.parquet")
    pq.write_table(t.slice(1), folder / "layer_04.parquet")
    refused(tmp_path, capsys, [folder, "--out", tmp_path / "t.parquet"],
            "layer 04 (layer_04.parquet) has 2 tokens but layer 02 (layer_02.parquet) has 3",
            "cannot be matched")


def test_a_folder_of_other_files(tmp_path, capsys):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "notes.txt").write_text("x")
    refused(tmp_path, capsys, [tmp_path / "d", "--out", tmp_path / "t.parquet"],
            "a folder holds neither FLAME-MoE-Traces' layer_NN.parquet files nor per-request")


@pytest.mark.parametrize("edit, message", [
    (lambda d: d["choices"][0]["routed_experts"][0].pop(), "lists of different lengths"),
    (lambda d: d["choices"][1].update(routed_experts=[[[1, 2, 3]] * 3]), "requests disagree on [MoE layers, top-k]"),
    (lambda d: [c.update(routed_experts=None) for c in d["choices"]], "no routed_experts found"),
    (lambda d: d["choices"][0].update(routed_experts="bm90IG5weQ=="), "not base64 of an .npy array"),
])
def test_bad_vllm_responses(tmp_path, capsys, edit, message):
    doc = json.loads((FIXTURES / "vllm_response.json").read_text())
    edit(doc)
    path = tmp_path / "resp.json"
    path.write_text(json.dumps(doc))
    refused(tmp_path, capsys, [path, "--out", tmp_path / "t.parquet"], message)


def test_vllm_base64_npy_routes_are_read(tmp_path):
    import base64
    import io

    doc = json.loads((FIXTURES / "vllm_response.json").read_text())
    buf = io.BytesIO()
    np.save(buf, np.array(doc["choices"][0]["routed_experts"], dtype=np.int16))
    doc["choices"][0]["routed_experts"] = base64.b64encode(buf.getvalue()).decode()
    path = tmp_path / "resp.json"
    path.write_text(json.dumps(doc))
    a, _ = import_routes(path)
    b, _ = import_routes(FIXTURES / "vllm_response.json")
    assert np.array_equal(a.root_routes, b.root_routes)


def test_a_forward_cut_short_is_a_gap_not_a_renumbering(tmp_path, truth):
    path = write_llama_csv(truth, tmp_path / "l.csv", IDS)
    path.write_text("".join(_lines(path)[:-1]))  # the last decode step lost its last layer
    with pytest.raises(SimmoeError, match="1 \\(token, layer\\) cells have no routes"):
        import_routes(path)
    trace, report = import_routes(path, on_gap="drop")
    assert report.dropped_tokens == 1 and trace.requests.output_len.tolist() == [len(truth[0][2]),
                                                                                 len(truth[1][2]) - 1]


def test_the_model_s_moe_layers_name_the_log_s_layer_ids(tmp_path, truth):
    path = write_megatron(truth, tmp_path / "r.jsonl", [1, 2, 5])
    trace, report = import_routes(path, num_layers=3, moe_layers=(1, 2, 5), decoder_layers=6)
    assert "layer ids read as the model's MoE layers [1, 2, 5]" in report.notes
    assert trace.geometry.moe_layers == (1, 2, 5)
    # A model layer the log never mentions: the log is of another model, not a log with gaps.
    with pytest.raises(GeometryMismatch, match="no record of layer 3: the log has 3 of the 4 layers"):
        import_routes(path, num_layers=4, moe_layers=(1, 2, 3, 5), decoder_layers=6, on_gap="drop")


def test_long_format_renumbered_layers_are_pointed_out(tmp_path, capsys):
    recs = [{"request_id": "a", "token_idx": t, "layer": layer, "experts": [1, 2]}
            for layer in range(2) for t in range(6 if layer == 0 else 4)]  # layer 1 lost two tokens
    log = tmp_path / "log.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in recs))
    refused(tmp_path, capsys, [log, "--out", tmp_path / "t.parquet"], "2 (token, layer) cells have no routes",
            "request 'a': layer 1 has 4 tokens, layer 0 6, each numbered from 0 without a gap: if tokens "
            "were dropped in some layers only and renumbered")
    _, report = import_routes(log, on_gap="drop")
    assert any("renumbered" in n for n in report.notes)


def test_a_log_cut_inside_its_last_token_raises_no_renumbering_hint(tmp_path):
    recs = [{"request_id": "a", "token_idx": t, "layer": layer, "experts": [1, 2]}
            for t in range(4) for layer in range(3) if (t, layer) != (3, 2)]
    log = tmp_path / "log.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in recs))
    with pytest.raises(SimmoeError) as err:
        import_routes(log)
    assert "renumbered" not in str(err.value) and "1 (token, layer) cells" in str(err.value)


# ------------------------------------------------------------- damaged files ---

DAMAGEABLE = ["warp_two_requests.jsonl", "llama_moe_trace.csv", "llama_layer_experts.csv",
              "megatron_router_trace_rank0.jsonl", "vllm_response.json", "vllm_requests.npz",
              "vllm_request.safetensors", "flame_iter_0001/layer_03.parquet"]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from(DAMAGEABLE),
       edits=st.lists(st.tuples(st.floats(0, 1, exclude_max=True), st.integers(0, 2),
                                st.binary(min_size=1, max_size=6)), min_size=1, max_size=3))
def test_damaged_tool_logs_fail_cleanly(tmp_path_factory, name, edits):
    """Bytes overwritten, cut out or inserted: an import or a SimmoeError, never another error."""
    d = tmp_path_factory.mktemp("dmg")
    src = FIXTURES / name
    target = d / src.name
    if name.startswith("flame"):
        shutil.copytree(src.parent, d / "iter")
        target = d / "iter" / src.name
    data = bytearray(src.read_bytes())
    for where, op, blob in edits:
        i = int(where * len(data))
        if op == 0:
            data[i : i + len(blob)] = blob
        elif op == 1:
            del data[i : i + len(blob)]
        else:
            data[i:i] = blob
    target.write_bytes(bytes(data))
    with contextlib.suppress(SimmoeError):
        import_routes(target.parent if name.startswith("flame") else target, on_gap="drop")


@pytest.mark.parametrize("name, text, fmt, message", [
    ("h.csv", "layer_id,expert_ids\n", None, "no records (only a header line)"),
    ("h.csv", "layer,expert\n", None, "no records (only a header line)"),
    ("m.jsonl", '{"step": 0, "layer": 1, "top_indices": []}\n', None, "every record's top_indices is empty"),
    ("m.jsonl", '{"step": 0, "layer": 1, "top_indices": [[1.5, 2]]}\n', None, "expected [num_tokens][topk]"),
    ("v.json", '{"id": "x", "choices": [3]}', "vllm", "choice 0 is a JSON int, not an object"),
    ("w.jsonl", '{"tok": 0, "layers": [[1, 2]]}\n{"tok": 1, "layers": [[1]]}\n', None,
     "row 1, field 'layers': layer 0: 1 experts, but row 0 lists 2"),
])
def test_small_broken_logs(tmp_path, capsys, name, text, fmt, message):
    path = tmp_path / name
    path.write_text(text)
    argv = [path, "--out", tmp_path / "t.parquet"] + (["--format", fmt] if fmt else [])
    refused(tmp_path, capsys, argv, message)
