"""The reproduction manifest (data/reference/reproduction.yaml) against the repository: every status is
one of the six, every notebook, campaign and reference file it names exists, an item measured here
names a committed store holding its measurements and an item not measured names none, every Table
and Figure of each seed's text is listed (from data/reference/seed_items.csv, copied from the seed
files by scripts/seed_items.py, so this runs where the seeds are not), and the README's study table
is the one it generates."""

import json
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from labkit.errors import ConfigError
from labkit.store import Store
from labkit.studies import manifest

REPO = Path(__file__).resolve().parents[2]
ITEMS = manifest.load_manifest()


def test_the_statuses_are_exactly_the_six():
    assert manifest.STATUSES == (
        "reproduced here",
        "substituted",
        "re-analysed from published tables",
        "runnable here, not run",
        "not measured",
        "needs hardware or a cloud we do not have",
    )
    assert set(manifest.STATUS_DOCS) == set(manifest.STATUSES)
    for e in ITEMS:
        assert e["status"] in manifest.STATUSES, e


def test_every_notebook_campaign_and_reference_file_named_exists():
    assert manifest.problems(ITEMS) == []
    assert manifest.problems([{**a, "reference": []} for a in manifest.load_additions()]) == []
    assert {e["seed"] for e in ITEMS} == {"000", "001", "002", "003", "004"}
    cited = (REPO / "data" / "reference" / "README.md").read_text(encoding="utf-8") + "".join(
        p.read_text(encoding="utf-8") for p in (REPO / "data" / "reference").glob("*.csv")
    )
    for e in ITEMS:
        assert e["file"] in cited, e["file"]


@pytest.mark.parametrize(
    "e",
    [e for e in ITEMS if e["status"] in manifest.MEASURED],
    ids=lambda e: f"{e['seed']}-{'+'.join(e['ref'])}-{e['name'][:30]}",
)
def test_an_item_measured_here_names_a_store_holding_its_measurements(e):
    counts = {c: manifest.measurement_count(c, e["metrics"], e["levels"]) for c in e["campaigns"]}
    assert any(counts.values()), (e["name"], counts)


@pytest.mark.parametrize(
    "e",
    [e for e in ITEMS if e["status"] not in manifest.MEASURED],
    ids=lambda e: f"{e['seed']}-{'+'.join(e['ref'])}-{e['name'][:30]}",
)
def test_an_item_not_measured_here_names_no_campaign_with_data(e):
    assert e["campaigns"] == [], e["name"]
    for c in e["no_data_in"]:  # ran the workload, timed nothing of this item
        assert manifest.measurement_count(c, e["metrics"], e["levels"]) == 0, (e["name"], c)


def test_the_reviewers_findings_stay_fixed():
    """Issue 42 item 6: five of seed 000's six PARSEC applications were never measured; seed 004's
    Bonnie++ reads were never timed on native, Docker or LXD, nor seeks on native or Docker (LXC's
    since the re-run, with no native baseline); seed 003's profiling figure,
    Figures 5.9-5.19 and 802.3ad are listed; QEMU TCG is never the seed's KVM."""

    def by_ref(seed, ref):
        return [e for e in ITEMS if e["seed"] == seed and ref in e["ref"]]

    for fig in ("Fig. 3.2", "Fig. 3.3", "Fig. 3.4", "Fig. 3.5", "Fig. 3.6"):
        assert [e["status"] for e in by_ref("000", fig)] == ["not measured"], fig
    read = [
        e
        for e in by_ref("004", "Fig. 7.4")
        if "read_kib_per_s" in e["metrics"] and "libvirt" not in json.dumps(e["levels"])
    ]
    seeks = [
        e
        for e in by_ref("004", "Fig. 7.5")
        if "seeks_per_s" in e["metrics"] and "local" in json.dumps(e["levels"])
    ]
    assert [e["status"] for e in read + seeks] == ["not measured", "not measured"]
    assert (
        manifest.measurement_count(
            "overhead-bonnie", ["read_kib_per_s"], {"platform": ["local", "docker", "lxd"]}
        )
        == 0
    )
    assert manifest.measurement_count("overhead-bonnie", ["seeks_per_s"], seeks[0]["levels"]) == 0
    # since the re-run of 2026-11-29 only LXC's runs timed seeks: with no native baseline, substituted
    lxc = [e for e in by_ref("004", "Fig. 7.5") if e["levels"] == {"platform": ["lxd"]}]
    assert [e["status"] for e in lxc] == ["substituted"] and "no native baseline" in lxc[0]["by"]
    for ref in ["Fig. 5.1", *(f"Fig. 5.{n}" for n in range(9, 20))]:
        assert by_ref("003", ref), ref
    assert any("802.3ad" in e["name"] for e in by_ref("003", "Fig. 5.18"))
    for e in ITEMS:
        if e["status"] == "reproduced here":
            assert not any("libvirt" in c for c in e["campaigns"]) or e["levels"].get("platform"), e["name"]
            assert "libvirt" not in e["levels"].get("platform", []), e["name"]
        if "TCG" in e["by"]:
            assert e["status"] == "substituted"


def stored_design(campaign: str) -> tuple[dict, dict]:
    """(design factors, workload params) of a committed campaign, read-only."""
    with Store(REPO / "data" / campaign / "store.sqlite", readonly=True) as st:
        meta = st.meta()
    return meta["design"]["factors"], meta["workload"]["params"]


def test_the_sizes_a_text_states_are_the_sizes_its_campaigns_ran():
    """Issue 42: seed 002's items said "board 15; 13 in affinity-platforms" and memory "128/256 in
    affinity-platforms" after those campaigns were re-run at board 16 and 256/512 MB. Every N-queens
    board and memory pair an item states is what each of its campaigns ran (from the stores' meta)."""
    checked = 0
    for e in ITEMS:
        boards = {int(b) for b in re.findall(r"board (\d+)", e["by"])}
        memory = re.search(r"memory (\d+)/(\d+) MB", e["by"])
        for c in e["campaigns"]:
            factors, params = stored_design(c)
            if boards and "board" in params:
                assert {params["board"]} == boards, (e["name"], c, params["board"], e["by"])
                checked += 1
            if memory and "memory_mb" in factors:
                assert factors["memory_mb"] == [int(memory[1]), int(memory[2])], (e["name"], c, e["by"])
                checked += 1
    assert checked >= 5  # Fig. 1's three N-queens campaigns and Table 2's two


def test_every_table_and_figure_of_each_seed_is_listed():
    seed_items = manifest.load_seed_items()
    assert {s["seed"] for s in seed_items} == {e["seed"] for e in ITEMS}
    assert manifest.seed_item_problems(ITEMS, seed_items) == []
    # the CSV says which seed file (and checksum) each identifier came from
    head = [
        ln for ln in manifest.seed_items_path().read_text(encoding="utf-8").splitlines() if ln.startswith("#")
    ]
    for e in ITEMS:
        assert any(e["file"] in ln and "sha256" in ln for ln in head), e["file"]


def test_the_script_reads_tables_and_figures_from_seed_files(tmp_path):
    """scripts/seed_items.py on a seed folder of its own (the lab's seeds are never beside a clone):
    Portuguese and English words, plurals, a sub-figure folded into its figure, the seed's checksum."""
    import hashlib

    text = (
        "A Tabela 2 mostra ... conforme a Figura 3.1 e a Figura 3.1(b); as Tabelas 4 e a Fig. 5.2(a);\n"
        "Figure 7 and Table 2 again.\n"
    )
    (tmp_path / "007_abc123.txt").write_text(text, encoding="utf-8")
    (tmp_path / "notes.md").write_text("Table 99\n")  # not a seed file: left out
    got = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "seed_items.py"), "--seeds", str(tmp_path), "--out", "-"],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    rows = [ln for ln in got.splitlines() if ln and not ln.startswith("#")]
    refs = [ln.split(",")[2] for ln in rows[1:]]
    assert refs == ["Table 2", "Fig. 3.1", "Table 4", "Fig. 5.2", "Fig. 7"], got
    assert hashlib.sha256(text.encode()).hexdigest() in got and "Table 99" not in got


def test_seed_item_problems_names_what_is_missing_or_extra():
    items = [{"seed": "9", "file": "9_a.txt", "ref": ["Fig. 1", "Table 2(a)", "§3"]}]
    seed = [
        {"seed": "9", "file": "9_a.txt", "ref": "Fig. 1"},
        {"seed": "9", "file": "9_a.txt", "ref": "Fig. 2"},
    ]
    got = manifest.seed_item_problems(items, seed)
    assert got == [
        "seed 9: Fig. 2 is in the seed's text but not in the manifest",
        "seed 9: the manifest lists Table 2, which the seed's text does not name",
    ]
    assert manifest.ref_base("Fig. 2(a)") == "Fig. 2"


def committed_campaigns() -> set[str]:
    """The campaigns whose store git tracks: ``make demo`` leaves a campaign of its own in data/
    (affinity-local-<date>), which is the user's, not the repository's; outside a git checkout,
    every store in data/."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z", "--", "data/*/store.sqlite"],
            cwd=REPO,
            capture_output=True,
            check=True,
            timeout=60,
        ).stdout.decode()
    except (OSError, subprocess.SubprocessError):
        return {p.parent.name for p in (REPO / "data").glob("*/store.sqlite")}
    return {Path(p).parent.name for p in out.split("\0") if p}


def test_every_committed_seed_campaign_is_in_the_manifest():
    named = {c for e in ITEMS for c in e["campaigns"]} | {
        c for a in manifest.load_additions() for c in a["campaigns"]
    }
    committed = committed_campaigns()
    assert committed <= named, sorted(committed - named)


def test_the_readme_table_is_generated_from_the_manifest():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert manifest.rewrite_readme(readme, ITEMS, manifest.load_additions()) == readme, (
        "README.md is stale: python -m labkit.studies.manifest --readme"
    )
    assert manifest.main(["--check"]) == 0


def test_a_notebook_summary_lists_its_items_and_counts():
    text = manifest.summary("02_virtualization_overhead")
    mine = [e for e in ITEMS if e["notebook"] == "02_virtualization_overhead.ipynb"]
    assert text.count("\n| ") == len(mine) + 1  # the header row, then one row per item
    for status in {e["status"] for e in mine}:
        n = sum(e["status"] == status for e in mine)
        assert f"{n} {status}" in text
    assert "`overhead-disk`" in text  # labkit's addition, said apart
    assert (
        manifest.summary("05a_interconnect_public_cloud.ipynb").count("| re-analysed from published tables |")
        == 3
    )
    with pytest.raises(ConfigError, match="no item for notebook nope.ipynb"):
        manifest.summary("nope")


def _item_yaml(**fields) -> str:
    item = {"name": "a", "notebook": "n.ipynb", **fields}
    return "seeds:\n  '000':\n    file: x.txt\n    title: t\n    items:\n      - " + json.dumps(item) + "\n"


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"status": "done"}, r"seeds.000.items\[0\]: status 'done'"),
        ({"status": "runnable here"}, "status 'runnable here'"),  # the old status is gone
        ({"status": "substituted", "campaigns": ["c"]}, "says 'by' what"),
        ({"status": "not measured", "by": "x"}, "only a substituted item has 'by'"),
        ({"status": "needs hardware or a cloud we do not have"}, "say what it 'needs'"),
        ({"status": "reproduced here"}, "names the committed campaign"),
        ({"status": "not measured", "campaigns": ["c"]}, "names no campaign"),
        ({"status": "re-analysed from published tables"}, "names its 'reference' files"),
        ({"status": "not measured", "ref": "Figure 3"}, "ref 'Figure 3'"),
        ({"status": "not measured", "kind": "figure"}, "kind 'figure'"),
        ({"status": "not measured", "colour": "red"}, "unknown field"),
    ],
)
def test_a_bad_manifest_is_refused_with_where(tmp_path, fields, message):
    bad = tmp_path / "m.yaml"
    bad.write_text(_item_yaml(**fields))
    with pytest.raises(ConfigError, match=message):
        manifest.load_manifest(bad)


def test_problems_and_the_readme_block_refuse_what_is_missing():
    entries = [
        {"seed": "9", "name": "x", "notebook": "nope.ipynb", "campaigns": ["nope"], "reference": ["nope.csv"]}
    ]
    assert len(manifest.problems(entries)) == 3
    with pytest.raises(ConfigError, match="exactly one reproduction block"):
        manifest.rewrite_readme("no block", [])


def _store(root: Path, campaign: str, runs: list[tuple[dict, str, dict]]) -> None:
    """A minimal store: runs (levels, status, {metric: value})."""
    (root / "data" / campaign).mkdir(parents=True)
    con = sqlite3.connect(root / "data" / campaign / "store.sqlite")
    con.execute("CREATE TABLE runs (run_id TEXT, levels TEXT, status TEXT)")
    con.execute("CREATE TABLE measurements (run_id TEXT, instance INTEGER, metric TEXT, value REAL)")
    for i, (levels, status, values) in enumerate(runs):
        con.execute("INSERT INTO runs VALUES (?, ?, ?)", (f"r{i}", json.dumps(levels), status))
        for metric, value in values.items():
            con.execute("INSERT INTO measurements VALUES (?, 0, ?, ?)", (f"r{i}", metric, value))
    con.commit()
    con.close()


def test_data_problems_catch_a_status_the_store_contradicts(tmp_path):
    _store(
        tmp_path,
        "disk",
        [
            ({"platform": "local"}, "ok", {"write": 1.0}),
            ({"platform": "libvirt"}, "ok", {"write": 2.0, "read": 3.0}),
            ({"platform": "local"}, "failed", {"read": 4.0}),
        ],
    )
    assert manifest.measurement_count("disk", root=tmp_path) == 3  # the failed run's row is not counted
    assert manifest.measurement_count("disk", ["read"], {"platform": ["local"]}, root=tmp_path) == 0
    assert manifest.measurement_count("disk", ["read"], {"platform": ["libvirt"]}, root=tmp_path) == 1
    assert manifest.measurement_count("disk", ["read"], {"threads": [1]}, root=tmp_path) == 0

    def item(status, **kw):
        return {
            "seed": "9",
            "ref": ["Fig. 1"],
            "name": "n",
            "status": status,
            "campaigns": [],
            "metrics": [],
            "levels": {},
            "no_data_in": [],
            **kw,
        }

    claims_read = item(
        "reproduced here", campaigns=["disk"], metrics=["read"], levels={"platform": ["local"]}
    )
    assert (
        "none of disk holds a measurement of read" in manifest.data_problems([claims_read], root=tmp_path)[0]
    )
    says_none = item("not measured", no_data_in=["disk"], metrics=["write"], levels={"platform": ["local"]})
    assert "holds 1 measurement(s)" in manifest.data_problems([says_none], root=tmp_path)[0]
    fine = [
        item("substituted", campaigns=["disk"], metrics=["read"], levels={"platform": ["libvirt"]}),
        item("not measured", no_data_in=["disk"], metrics=["read"], levels={"platform": ["local"]}),
    ]
    assert manifest.data_problems(fine, root=tmp_path) == []
    with pytest.raises(ConfigError, match="campaign gone: no store"):
        manifest.measurement_count("gone", root=tmp_path)
