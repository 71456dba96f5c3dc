"""MLPerf Training scores: olympic time-to-train per benchmark folder.

Mirrors `mlperf_logging.result_summarizer` (strong scaling): each run's score is
`(run_stop - run_start) / 60000` minutes; runs that fail (did not converge,
no run_stop) are dropped and count as the slowest; then the fastest and the
slowest are dropped (up to 4 each for unet3d) and the rest averaged. More
failed runs than may be dropped gives no score. The olympic mean is then multiplied
by the `scaling_factor` of the benchmark folder's `scaling.json`, the factor MLPerf's
review writes there when the RCP check normalises a result (the summarizer's
`_get_scaling_factor`: 1.0 when the file is absent).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import msgspec

MS_PER_MINUTE = 60_000.0
SCALING_FILE = "scaling.json"


class ScalingError(ValueError):
    """A `scaling.json` that MLPerf's summarizer would not read either."""


def scaling_factor(folder: Path | str | None) -> float:
    """The folder's `scaling.json` `scaling_factor` (1.0 without the file), as the summarizer reads it."""
    if folder is None:
        return 1.0
    path = Path(folder) / SCALING_FILE
    if not path.is_file():
        return 1.0
    try:
        factor = json.loads(path.read_text())["scaling_factor"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ScalingError(f"{path}: no readable scaling_factor ({type(exc).__name__}: {exc})") from exc
    if isinstance(factor, bool) or not isinstance(factor, int | float) or not factor > 0:
        raise ScalingError(f"{path}: scaling_factor must be a positive number, not {factor!r}")
    return float(factor)


def max_dropped(benchmark: str | None) -> int:
    """How many scores are dropped at each end (unet3d's high variance earns it 4)."""
    return 4 if benchmark == "unet3d" else 1


def olympic_score(minutes: Sequence[float], non_converged: int, benchmark: str | None) -> float | None:
    """Olympic mean of converged runs' minutes; `non_converged` runs are the slowest, already dropped."""
    drop = max_dropped(benchmark)
    if non_converged > drop:
        return None
    scores = sorted(minutes)
    countable = scores[drop : len(scores) - (drop - non_converged)]
    if not countable:
        return None
    return sum(countable) / len(countable)


class BenchmarkScore(msgspec.Struct, frozen=True):
    """The score of one benchmark folder, with the runs that went into it."""

    benchmark: str | None
    runs: int
    converged: int
    score_minutes: float | None  # olympic mean × scaling_factor: the official score
    dropped: tuple[str, ...]  # run ids left out: non-converged ones and the fastest/slowest
    note: str
    scaling_factor: float = 1.0
    olympic_minutes: float | None = None  # before scaling


def score_runs(benchmark: str | None, runs: Sequence[tuple[str, float | None]],
               scaling: float = 1.0) -> BenchmarkScore:
    """`runs`: (run id, minutes or None when the run did not converge); `scaling`: scaling.json's factor."""
    ok = sorted(((m, rid) for rid, m in runs if m is not None), key=lambda p: (p[0], p[1]))
    failed = [rid for rid, m in runs if m is None]
    drop = max_dropped(benchmark)
    score = olympic_score([m for m, _ in ok], len(failed), benchmark)
    dropped: list[str] = list(failed)
    if score is not None:
        dropped += [rid for _, rid in ok[:drop]]
        keep_top = drop - len(failed)
        if keep_top > 0:
            dropped += [rid for _, rid in ok[len(ok) - keep_top :]]
    if len(failed) > drop:
        note = f"{len(failed)} runs did not converge: more than the {drop} that may be dropped, no score"
    elif failed:
        note = f"{len(failed)} non-converged run(s) dropped as the slowest"
    elif score is None:
        note = "too few runs for an olympic score"
    else:
        note = ""
    scaled = score * scaling if score is not None else None
    if score is not None and scaling != 1.0:
        note = (note + "; " if note else "") + f"olympic mean {score:.4f} min × scaling.json {scaling:g}"
    return BenchmarkScore(benchmark, len(runs), len(ok), scaled, tuple(dropped), note, scaling, score)


class EnergyScore(msgspec.Struct, frozen=True):
    """The energy score of one benchmark folder (MLPerf power logs): olympic mean of its runs' joules,
    the runs ranked by their time-to-train (not by energy), × scaling.json's factor."""

    joules: float | None  # the official energy score; None: see `note`
    olympic_joules: float | None  # before scaling
    dropped: tuple[str, ...]  # run ids left out, as for the time score
    note: str


def energy_score(benchmark: str | None, runs: Sequence[tuple[str, float | None, float | None]],
                 scaling: float = 1.0) -> EnergyScore:
    """`runs`: (run id, minutes or None when not converged, joules of a converged run).

    The summarizer's `_index_olympic_average`: the converged runs' energies in the order of their
    times, the first `max_dropped` and the last `max_dropped - non_converged` left out, the rest averaged.
    Every converged run needs its joules (the summarizer stops otherwise)."""
    ok = sorted(((m, rid, j) for rid, m, j in runs if m is not None), key=lambda p: (p[0], p[1]))
    failed = [rid for rid, m, _ in runs if m is None]
    missing = [rid for _, rid, j in ok if j is None]
    drop = max_dropped(benchmark)
    if missing:
        return EnergyScore(None, None, (), f"no energy for {', '.join(missing)}")
    if len(failed) > drop:
        return EnergyScore(None, None, tuple(failed),
                           f"{len(failed)} runs did not converge: more than the {drop} that may be dropped")
    kept = ok[drop : len(ok) - (drop - len(failed))]
    if not kept:
        return EnergyScore(None, None, tuple(failed), "too few runs for an olympic score")
    olympic = sum(j for _, _, j in kept if j is not None) / len(kept)
    kept_ids = {rid for _, rid, _ in kept}
    dropped = (*failed, *(rid for _, rid, _ in ok if rid not in kept_ids))
    note = f"olympic mean {olympic:,.0f} J × scaling.json {scaling:g}" if scaling != 1.0 else ""
    return EnergyScore(olympic * scaling, olympic, dropped, note)
