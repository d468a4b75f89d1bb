"""A pipeline-shaped stand-in for PARSEC's Dedup and Ferret (seed 001). **It is not PARSEC.**

Seed 001 ran PARSEC 3.0's Dedup (deduplicating compression, I/O heavy) and Ferret (similarity
search, CPU bound). Without PARSEC (bring it with the ``parsec`` workload), this workload runs a
pipeline of the same *shape* from packaged tools (coreutils, gzip or xz) over generated data,
stage after stage, each stage spread over ``threads`` workers (``xargs -P``):

| app | stages (as in seed 001, Figure 1) | load |
|---|---|---|
| ``dedup`` | fragment (``split`` into chunks) -> hash (``sha256sum``) -> deduplicate (first chunk per hash) -> compress unique chunks (``gzip``/``xz``, written to disk) -> reassemble the output (``cat``, ``sync``) | disk writes and reads, CPU |
| ``ferret`` | segment (``split``) -> extract a feature per chunk (compressed size at ``-9`` and a hash prefix) -> index (``sort`` by feature) -> rank (the ``top`` nearest to the first chunk) | CPU; nothing written but the chunks |

The input is ``size_mb`` MiB made of a text block repeated ``copies`` times (so Dedup finds
``copies`` copies of every chunk), written in the instance's work directory.

Parameters: ``app``, ``size_mb`` (default 32), ``chunk_kb`` (256), ``copies`` (4),
``compressor`` (``gzip`` or ``xz``), ``level`` (1-9, default 6), ``threads`` (None: vCPUs),
``timeout_s``. Metrics: ``stages_s`` (the response and the timed work: the seconds from a
timestamp the script takes just before the first stage to one just after the last, so nothing
between stages is lost), ``stage_<name>_s`` per stage (consecutive: they sum to ``stages_s`` up to
rounding), ``wall_time_s`` (the whole process as the controller saw it: generating the input,
starting the script in the instance, e.g. ``lxc exec``, and removing its files at the end, besides
the stages), ``chunks``, ``unique_chunks``, and for dedup ``output_mb`` and ``compression_ratio``.

The response is ``stages_s``, not ``wall_time_s``, because PARSEC reports the time of its region of
interest, not process setup, and because the setup and clean-up around the stages grow differently
per platform (a large share of a short LXD run lies outside the stages: issue 42).
Campaigns stored before ``stages_s`` existed have only the ``stage_<name>_s``; their measured work
(:meth:`Pipeline.measured_seconds`) and :func:`labkit.studies.with_stages_total` take the sum.
"""

from __future__ import annotations

import re
import shlex
from typing import TYPE_CHECKING

from ..errors import BenchmarkError, tail
from .base import Measurement, Workload, require_tool, run_checked
from .params import THREADS, TIMEOUT, Int, Str

if TYPE_CHECKING:
    from ..backends.base import Instance

APPS = ("dedup", "ferret")
COMPRESSORS = {"gzip": "gzip", "xz": "xz-utils"}
STAGES = {
    "dedup": ("fragment", "hash", "deduplicate", "compress", "reassemble"),
    "ferret": ("segment", "extract", "index", "rank"),
}
_LINE = re.compile(r"^labkit-pipeline (\w+) ([0-9.]+)$", re.M)


def script(
    app: str,
    *,
    size_mb: int,
    chunk_kb: int,
    copies: int,
    compressor: str,
    level: int,
    threads: int,
    wdir: str,
) -> str:
    """The shell script of one run (POSIX sh + coreutils): prints ``labkit-pipeline <key> <value>``
    lines (stage seconds and counts). Every value is an integer or a checked choice."""
    unique_bytes = max(
        chunk_kb * 1024, (size_mb * 1024 * 1024 // copies) // (chunk_kb * 1024) * chunk_kb * 1024
    )
    lines = f"$(({unique_bytes} / 24 + 1))"
    w = shlex.quote(wdir)
    head = f"""set -e
rm -rf {w} && mkdir -p {w}/chunks && cd {w}
seq -f 'labkit pipeline line %012.0f' 1 {lines} | head -c {unique_bytes} > block
i=0; while [ $i -lt {copies} ]; do cat block; i=$((i+1)); done > input
rm block
now() {{ date +%s.%N; }}
stage() {{ t1=$(now); echo "labkit-pipeline $1 $(echo "$t1 - $t0" | awk '{{print $1 - $3}}')"; t0=$t1; }}
stages() {{ echo "labkit-pipeline stages $(echo "$t0 - $tstart" | awk '{{print $1 - $3}}')"; }}
t0=$(now); tstart=$t0
"""
    if app == "dedup":
        body = f"""split -b {chunk_kb}k -a 6 input chunks/c; stage fragment
cd chunks && ls | xargs -P {threads} -n 16 sha256sum > ../hashes && cd ..; stage hash
sort -k2 hashes | awk '!seen[$1]++ {{print $2}}' | sort > unique; stage deduplicate
cd chunks && xargs -P {threads} -n 8 {compressor} -k -{level} < ../unique && cd ..; stage compress
sed 's/$/.{"gz" if compressor == "gzip" else "xz"}/; s|^|chunks/|' unique | xargs cat > output && sync output; stage reassemble; stages
echo "labkit-pipeline chunks $(ls chunks | grep -vc '\\.')"
echo "labkit-pipeline unique_chunks $(wc -l < unique)"
echo "labkit-pipeline output_bytes $(wc -c < output)"
echo "labkit-pipeline input_bytes $(wc -c < input)"
"""
    else:
        body = f"""split -b {chunk_kb}k -a 6 input chunks/c; stage segment
cd chunks && ls | xargs -P {threads} -n 8 sh -c 'for f; do echo "$f $({compressor} -9 -c "$f" | wc -c) $(sha256sum < "$f" | cut -c1-8)"; done' _ > ../features && cd ..; stage extract
sort -k2,2n -k1,1 features > index; stage index
ref=$(grep '^caaaaaa ' features | cut -d' ' -f2)
awk -v r="$ref" '{{d = $2 - r; if (d < 0) d = -d; print d, $1}}' index | sort -n | head -n 10 > ranked; stage rank; stages
echo "labkit-pipeline chunks $(wc -l < features)"
echo "labkit-pipeline unique_chunks $(cut -d' ' -f3 features | sort -u | wc -l)"
"""
    return head + body + f"cd / && rm -rf {w}\n"


class Pipeline(Workload):
    """See the module docstring: a Dedup- or Ferret-shaped pipeline of packaged tools, not PARSEC."""

    name = "pipeline"
    response = "stages_s"
    timed_metrics = ("stages_s",)
    length_param = "size_mb"
    defaults = {
        "app": "dedup",
        "size_mb": 32,
        "chunk_kb": 256,
        "copies": 4,
        "compressor": "gzip",
        "level": 6,
        "threads": None,
        "timeout_s": 1800,
    }
    schema = {
        "app": Str(APPS),
        "size_mb": Int(1, 65536),
        "chunk_kb": Int(4, 65536),
        "copies": Int(1, 1000),
        "compressor": Str(tuple(COMPRESSORS)),
        "level": Int(1, 9),
        "threads": THREADS,
        "timeout_s": TIMEOUT,
    }
    min_memory_mb = 64

    @classmethod
    def measured_seconds(cls, metrics: dict[str, float], params: dict) -> float | None:
        """A run stored before ``stages_s`` existed: the sum of its ``stage_<name>_s`` (None when it
        has ``stages_s``, then that metric, or no stage time)."""
        if "stages_s" in metrics:
            return None
        stages = [v for k, v in metrics.items() if k.startswith("stage_") and k.endswith("_s")]
        return float(sum(stages)) if stages else None

    def prepare(self, instance: Instance) -> None:
        for tool, package in (
            ("split", "coreutils"),
            ("sha256sum", "coreutils"),
            ("xargs", "findutils"),
            ("awk", "mawk"),
            (self.params["compressor"], COMPRESSORS[self.params["compressor"]]),
        ):
            require_tool(instance, tool, package)

    def run(self, instance: Instance, params: dict) -> list[Measurement]:
        p = {**self.params, **params}
        if p["compressor"] != self.params["compressor"]:
            require_tool(instance, p["compressor"], COMPRESSORS[p["compressor"]])
        text = script(
            p["app"],
            size_mb=p["size_mb"],
            chunk_kb=p["chunk_kb"],
            copies=p["copies"],
            compressor=p["compressor"],
            level=p["level"],
            threads=p.get("threads") or p["vcpus"],
            wdir=f"{instance.workdir}/labkit-pipeline",
        )
        res = run_checked(instance, ["sh", "-c", text], timeout=p.get("timeout_s"))
        return parse(res.stdout, p["app"], res.duration_s, instance.index)

    def version(self, instance: Instance) -> dict:
        out = {}
        for tool in ("sha256sum", self.params["compressor"]):
            r = instance.exec([tool, "--version"], check=False, timeout=30)
            out[tool] = (r.stdout or r.stderr).splitlines()[0][:80] if (r.stdout or r.stderr) else "unknown"
        return out


def parse(text: str, app: str, wall_s: float, instance: int = 0) -> list[Measurement]:
    """Measurements from the script's ``labkit-pipeline`` lines (``wall_s``: the whole process);
    BenchmarkError if a stage, the stages' total or the chunk count is missing."""
    found = {k: float(v) for k, v in _LINE.findall(text or "")}
    missing = [s for s in (*STAGES[app], "stages", "chunks") if s not in found]
    if missing:
        raise BenchmarkError(f"pipeline {app}: no result for {missing}", None, tail(text))
    rows = [
        Measurement("stages_s", found["stages"], "s", instance),
        Measurement("wall_time_s", wall_s, "s", instance),
    ]
    rows += [Measurement(f"stage_{s}_s", found[s], "s", instance) for s in STAGES[app]]
    rows += [Measurement(k, found[k], "count", instance) for k in ("chunks", "unique_chunks") if k in found]
    if app == "dedup":
        rows.append(Measurement("output_mb", found["output_bytes"] / 2**20, "MiB", instance))
        rows.append(
            Measurement(
                "compression_ratio", found["input_bytes"] / max(found["output_bytes"], 1), "x", instance
            )
        )
    return rows
