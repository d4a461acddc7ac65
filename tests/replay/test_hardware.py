"""Hardware profiles: shipped files, the TOML format, validation and provenance."""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from simmoe.errors import ProfileError
from simmoe.hardware.profile import (
    HardwareProfile,
    list_profiles,
    load_profile,
    save_profile,
    to_toml,
)

SHIPPED = ("a100-pcie-40gb", "a100-sxm-resident", "rtx4090-24gb")


def test_shipped_profiles_load_and_say_where_they_come_from():
    assert set(SHIPPED) <= set(list_profiles())
    for name in SHIPPED:
        p = load_profile(name)
        assert p.name == name
        assert p.source.startswith("fitted to published figures (calibration set: ")
        assert p.expert_bytes == 9437184 and p.num_layers == 48
        assert len(p.evict_cost) == 32


def test_a100_coefficients_are_the_papers():
    p = load_profile("a100-pcie-40gb")
    cm = p.cost_model(cache=True)
    assert cm.beta == 0.210715513 and cm.b[0] == 142.214 and len(cm.b) == 8
    nc = p.cost_model(cache=False)
    assert nc.beta == 0.408001022 and nc.b[7] == 113.671
    assert p.copies_in_flight == 2


def test_copy_time_respects_the_physical_link_limit():
    # one 9,437,184-byte expert at 24.8 GB/s: 0.3805 ms of the copy engine
    p = load_profile("a100-pcie-40gb")
    assert p.link_ms_per_expert == pytest.approx(0.38053, rel=1e-4)
    assert p.effective_copy_ms >= p.link_ms_per_expert
    with pytest.raises(ProfileError, match="faster than the link allows"):
        p.replace(copy_ms=0.7)


def test_resident_profile_reads_experts_from_hbm_and_carries_evict_table():
    p = load_profile("a100-sxm-resident")
    assert p.resident and p.copy_ms == 0.0
    assert p.expert_ms == pytest.approx(9437184 / 2.039e12 * 1e3, rel=1e-3)
    published = {1: 6.83, 4: 8.02, 8: 9.17, 12: 9.43, 16: 10.01, 20: 10.77, 24: 10.62, 28: 10.36, 32: 11.06}
    for k, ms in published.items():
        assert p.evict_cost[k - 1] == pytest.approx(ms)
    with pytest.raises(ProfileError, match="no \\[cost_model.cache\\]"):
        p.cost_model(cache=True)


@pytest.mark.parametrize("name", SHIPPED)
def test_round_trip_through_toml(tmp_path, name):
    p = load_profile(name)
    out = save_profile(p, tmp_path / "copy.toml", header="copied for a test")
    q = load_profile(out)
    assert q == p
    assert out.read_text().startswith("# copied for a test\nformat = 1\n")


@given(st.floats(0, 50), st.floats(0, 2), st.integers(1, 8), st.booleans(),
       st.lists(st.floats(1, 500), min_size=1, max_size=9), st.text(max_size=20))
def test_round_trip_of_any_valid_profile(tmp_path_factory, forward, expert, c, overlap, b, text):
    p = HardwareProfile(name="x", description=text + '"\\\n', source="measured by hwprobe on cpu",
                        copy_ms=1.0, copies_in_flight=c, forward_ms=forward, expert_ms=expert,
                        overlap=overlap, cost_b_cache=tuple(b), cost_beta_cache=0.3,
                        copy_samples_ms=(0.5, 0.7))
    path = tmp_path_factory.mktemp("p") / "x.toml"
    save_profile(p, path)
    assert load_profile(path) == p


def write(tmp_path, text):
    path = tmp_path / "p.toml"
    path.write_text(text)
    return path


MINIMAL = """format = 1
name = "m"
description = "d"
source = "measured by hwprobe on cpu"
[copy]
copy_ms = 1.0
[compute]
forward_ms = 10.0
expert_ms = 0.1
"""


@pytest.mark.parametrize("edit, match", [
    (lambda t: t.replace('source = "measured by hwprobe on cpu"\n', ""), "missing field 'source'"),
    (lambda t: t.replace("expert_ms = 0.1", ""), "missing field 'compute.expert_ms'"),
    (lambda t: t.replace("copy_ms = 1.0", 'copy_ms = "fast"'), "'copy.copy_ms' must be a number"),
    (lambda t: t.replace("copy_ms = 1.0", "copy_ms = -1.0"), "'copy.copy_ms' must be a finite number >= 0"),
    (lambda t: t + "expert_msec = 1\n", "unknown field 'compute.expert_msec'"),
    (lambda t: t.replace("format = 1", "format = 9"), "unsupported profile format"),
    (lambda t: t + "[evict]\ncost_ms = [1.0, 0.0]\n", "'evict.cost_ms'"),
    (lambda t: t + "[cost_model.cache]\nbeta = 0.2\n", "'cost_model.cache.b' is missing"),
    (lambda t: t + "[cost_model.warm]\nbeta = 0.2\n", "unknown field 'cost_model.warm'"),
    (lambda t: t.replace("copy_ms = 1.0", "copy_ms = 1.0\ncopies_in_flight = 0"), "copies_in_flight"),
    (lambda t: t.replace("copy_ms = 1.0", "copy_ms = 1.0\nresident = true"), "resident"),
    (lambda t: t + "[draft\n", "not valid TOML"),
])
def test_bad_files_name_what_is_wrong(tmp_path, edit, match):
    with pytest.raises(ProfileError, match=match):
        load_profile(write(tmp_path, edit(MINIMAL)))


def test_minimal_file_takes_defaults(tmp_path):
    p = load_profile(write(tmp_path, MINIMAL))
    assert p.copies_in_flight == 2 and p.overlap and p.evict_cost == () and p.draft_level_ms == 0.0
    assert p.path == str(tmp_path / "p.toml")


def test_unknown_names_and_missing_files():
    with pytest.raises(ProfileError, match="unknown hardware profile 'h100'.*a100-pcie-40gb"):
        load_profile("h100")
    with pytest.raises(ProfileError, match="no such profile file"):
        load_profile("/nonexistent/x.toml")


def test_save_is_atomic(tmp_path):
    p = load_profile("a100-pcie-40gb")
    target = tmp_path / "out.toml"
    target.write_text("old")
    bad = HardwareProfile(**{**p.__dict__, "copy_ms": float("nan")})
    with pytest.raises(ProfileError):
        save_profile(bad, target)
    assert target.read_text() == "old"
    assert os.listdir(tmp_path) == ["out.toml"]
    with pytest.raises(ProfileError, match="no such folder"):
        save_profile(p, tmp_path / "missing" / "x.toml")


def test_toml_lists_every_section_that_has_values():
    text = to_toml(load_profile("a100-pcie-40gb"))
    for section in ("[copy]", "[compute]", "[draft]", "[cycle]", "[cost_model.cache]",
                    "[cost_model.no_cache]", "[evict]"):
        assert section in text
    assert "[cost_model.cache]" not in to_toml(load_profile("a100-sxm-resident"))


def test_offload_evict_tables_grow_with_k():
    for name in ("a100-pcie-40gb", "rtx4090-24gb"):
        c = np.array(load_profile(name).evict_cost)
        assert (np.diff(c) > 0).all()


def _add(after, text):
    return lambda t: t.replace(after, f"{after}\n{text}")


@pytest.mark.parametrize("edit, match", [
    (_add("copy_ms = 1.0", "copy_cv = 1e308"), "'copy.copy_cv' must be at most 10"),
    (lambda t: t.replace("forward_ms = 10.0", "forward_ms = 1e300"), "'compute.forward_ms' must be at most"),
    (_add("copy_ms = 1.0", "copies_in_flight = 100000"), "at most 1024"),
    (_add("copy_ms = 1.0", "samples_ms = [1.0, 1e200]"), r"at most 1e\+06 ms"),
    (lambda t: t + "[evict]\ncost_ms = [1.0, 1e9]\n", "'evict.cost_ms' must hold times of at most"),
    (lambda t: t.replace("[copy]", "expert_bytes = 1000000000000000\n[copy]"),
     "'expert_bytes' must be at most"),
    (_add("copy_ms = 1.0", "link_gbps = inf"), "'copy.link_gbps' must be a finite"),
])
def test_values_outside_plausible_ranges_are_refused(tmp_path, edit, match):
    with pytest.raises(ProfileError, match=match):
        load_profile(write(tmp_path, edit(MINIMAL)))


def test_largest_plausible_values_replay_without_overflow(tmp_path):
    from factories import random_trace

    from simmoe.replay.engine import ReplayConfig, replay

    text = MINIMAL.replace("copy_ms = 1.0", "copy_ms = 1e6\ncopy_cv = 10.0").replace("forward_ms = 10.0",
                                                                                     "forward_ms = 1e6")
    prof = load_profile(write(tmp_path, text))
    res = replay(random_trace(1), ReplayConfig(selector="ar", slots=0, cache="none", selector_ms=0.0), prof)
    assert np.isfinite(np.asarray(res.cycles["cycle_ms"], dtype=float)).all()


def test_a_folder_is_not_a_profile(tmp_path, capsys):
    from simmoe.cli import main

    with pytest.raises(ProfileError, match="is a folder") as e:
        load_profile(tmp_path)
    assert "no such profile file" not in str(e.value)
    (tmp_path / "p.toml").mkdir()
    with pytest.raises(ProfileError, match="is a folder"):
        load_profile(tmp_path / "p.toml")
    argv = ["fit", "--probes", "x.csv", "--hardware", str(tmp_path), "-o", str(tmp_path / "o.toml")]
    assert main(argv) == 2
    assert "is a folder" in capsys.readouterr().err
