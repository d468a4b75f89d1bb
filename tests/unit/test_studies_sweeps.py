"""data/reference/sweeps.csv (the sweeps the seeds describe) and the levels a notebook runs from it.

The expected levels are the seeds' own words (quoted here): seed 000 section 3.1 "até 8 *threads*,
para que de tal forma cada *thread* utilizasse um core/vCPU", section 3.2.3 "6 *threads*"; seed 003
section 4.2.1 "message sizes varying from 1 Byte up to 4 MBytes" (Figure 5.2: 2^22 the largest);
seed 004 section 7.3 "variando a quantidade de arquivos com os valores 25, 50 e 100" and
"quatro processos em paralelo"; seed 001 gives no thread counts."""

from __future__ import annotations

import pytest

from labkit.errors import ConfigError
from labkit.studies.sweeps import load_sweeps, paper_sweep, sweep_levels


def test_the_file_holds_the_seeds_levels_with_their_source():
    assert paper_sweep("000", "dedicated", "threads").levels == tuple(range(1, 9))
    assert paper_sweep("000", "overcommitted", "threads").levels == (6,)
    assert paper_sweep("003", "pingpong", "message_bytes").levels == tuple(2**k for k in range(23))
    assert paper_sweep("004", "bonnie", "files").levels == (25, 50, 100)
    assert paper_sweep("004", "bonnie", "concurrency").levels == (4,)
    assert paper_sweep("001", "pipeline", "threads").levels == ()
    for s in load_sweeps():
        assert s.where and s.stated and s.seed in {"000", "001", "002", "003", "004"}, s


def test_paper_levels_are_cut_to_the_machine_and_the_note_says_so():
    levels, note = sweep_levels(
        "paper", paper_sweep("000", "dedicated", "threads"), limit=2, what="this host's CPUs"
    )
    assert levels == [1, 2]
    assert note.startswith(
        "threads: 1, 2 threads here; the paper: 1, 2, 3, 4, 5, 6, 7, 8 (seed 000, section 3.1"
    )
    assert note.endswith("not run here: 3, 4, 5, 6, 7, 8 (above what this host's CPUs allows, 2)")
    levels, note = sweep_levels("paper", paper_sweep("004", "bonnie", "files"))
    assert levels == [25, 50, 100] and "not run here" not in note
    levels, note = sweep_levels([25, 50], paper_sweep("004", "bonnie", "files"))
    assert levels == [25, 50] and note.endswith("not run here: 100")
    assert sweep_levels(None, paper_sweep("004", "bonnie", "files")) == (None, "")


@pytest.mark.parametrize(
    "value, match",
    [
        ("paper", "gives no levels of threads"),  # seed 001
        ([0, 1], "level 0 is not allowed"),
        ([1, 3], "level 3 is above what the test allows"),
        ([], "not allowed; use None, 'paper' or a list"),
        ("all", "not allowed; use None, 'paper' or a list"),
        ([True], "level True is not allowed"),
    ],
)
def test_bad_values_are_refused_naming_the_parameter(value, match):
    sweep = paper_sweep("001", "pipeline", "threads")
    with pytest.raises(ConfigError, match=f"threads_levels.*{match}"):
        sweep_levels(value, sweep, limit=2, what="the test", name="threads_levels")


def test_nothing_of_the_paper_fits(tmp_path):
    with pytest.raises(ConfigError, match="none of the seed's levels .6. fits"):
        sweep_levels("paper", paper_sweep("000", "overcommitted", "threads"), limit=2)


def test_a_malformed_file_is_refused_with_its_row(tmp_path):
    bad = tmp_path / "s.csv"
    bad.write_text(
        "# c\nseed,experiment,factor,levels,unit,where,stated\n003,pp,message_bytes,1 x,bytes,w,s\n"
    )
    with pytest.raises(ConfigError, match=r"s.csv, row 1: levels '1 x'"):
        load_sweeps(bad)
    bad.write_text("seed,experiment,factor\n003,pp,message_bytes\n")
    with pytest.raises(ConfigError, match=r"columns \['levels', 'stated', 'unit', 'where'\] missing"):
        load_sweeps(bad)
    with pytest.raises(ConfigError, match="no sweep 009/x/y .* known: 000/dedicated/threads"):
        paper_sweep("009", "x", "y")
    with pytest.raises(ConfigError, match="not found"):
        load_sweeps(tmp_path / "none.csv")
