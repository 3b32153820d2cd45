"""A performance model: the time of (kernel, config, shape, device) from counted work.

Every prediction is a sum of physically meaningful terms, each a time in seconds
computed from the counted work (``ceiling.roofline.work``), the static ISA facts of the
compiled kernel (registers, spills, tensor-core instructions) and the device's
rates (``ceiling.roofline.machine``). For a tiled GEMM on a persistent grid (one program
per SM, tiles strided by the SM count):

* ``roof``: the floor no schedule beats: max of the tensor-core time of the
  tiles the busiest SM runs (tile and wave quantization: a partial tile costs a
  full one, the last wave is as long as a full one) and the compulsory HBM bytes
  over the HBM bandwidth;
* ``hbm``: the same bytes again, for the part of the traffic the K loop does not
  overlap with the math (skinny M is B-bandwidth-bound);
* ``smem``: the operand bytes the tensor cores of the busiest SM read from shared
  memory: each 64-row wgmma of a warpgroup re-reads the whole B slice, so a
  256x128 tile reads more per FLOP than a 128x256 one;
* ``pipe``: the busiest SM's K loop, each step as long as the slowest of its math,
  its loads at the SM's share of L2 bandwidth, and one memory latency hidden by
  the pipeline depth (stages - 1) and the resident CTAs;
* ``tiles``: a fixed prologue/epilogue cost per tile on the busiest SM;
* ``splitk``: split-K's second pass: the reduction launch and its read of the
  fp32 partial planes and write of the output;
* ``spill``: spilled bytes re-read every K-step;
* ``latency``: one memory latency per K-step of the busiest SM's tiles, hidden by
  the pipeline depth; with one tile per SM (skinny M) nothing else hides it;
* ``launch``: a constant per kernel launch.

A flash attention is placed by its tile schedule (``ceiling.roofline.attention_terms``):
visited blocks (causal diagonals in full), list-scheduled programs per SM, the
tensor-core time of the busiest SM, and ``exp``: its exponentials on the
special-function units.

``compute`` and ``l2`` are reported with the terms (the roofline placement and
the plots read them) but not fit: ``roof`` and ``pipe`` carry them.

The fitted model is ``time = sum(c_i * term_i)`` with non-negative coefficients,
fit per fit unit (device, op, and the direction where the problem names one:
``ceiling.roofline.selection.unit_key``) and per GEMM shape class by non-negative least
squares on relative error (each row divided by its measured time), on the records
``ceiling.roofline.selection`` keeps (our kernels, device time). A unit is fit only from
``MIN_PROBLEMS`` distinct problems or more (fewer would fit noise; the evaluation
says so). Without a fit the *analytic* coefficients apply (``roof`` + ``splitk`` +
``launch``, others 0) and the prediction says so.
"""

from __future__ import annotations

import json
import math
import random
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ceiling.microbench.records import Record
from ceiling.roofline import attention_terms as _attention
from ceiling.roofline import ceilings as _ceilings
from ceiling.roofline import work as _work
from ceiling.roofline.machine import Machine, from_ceilings

TERMS = ("launch", "roof", "hbm", "smem", "pipe", "tiles", "splitk", "spill", "latency", "exp")  # fitted
DIAGNOSTICS = ("compute", "l2")  # reported, not fitted
ANALYTIC = {"launch": 1.0, "roof": 1.0, "splitk": 1.0}  # everything else 0
LAUNCH_S = 4e-6  # host launch + grid setup, order of magnitude
REDUCE_LAUNCH_S = 2e-6  # one more kernel boundary in a stream or graph, order of magnitude
MEMORY_LATENCY_S = 0.6e-6  # one HBM round trip, ~700 cycles at ~1.1-2 GHz, order of magnitude
TILE_OVERHEAD_S = 0.5e-6  # prologue (first loads) + epilogue (store) per tile
# config keys that name the problem, not the kernel's tuning
PROBLEM_KEYS = ("dtype", "layout", "causal", "direction", "triangle")
MIN_PROBLEMS = 3  # distinct problems a fit needs: fewer leave the coefficients to the noise of one or two shapes
ATTENTION_OPS = ("attention", "attention_fwd", "attention_bwd")


@dataclass(frozen=True)
class StaticFacts:
    """What the compiler says about one compiled config (``ceiling.isa.profile``)."""

    registers: int | None = None
    spill_bytes: int = 0
    smem_bytes: int | None = None
    tensor_core_instructions: int | None = None


@dataclass(frozen=True)
class Prediction:
    seconds: float
    mode: str  # "fitted" or "analytic"
    terms: dict[str, float]


def _cfg(config: dict | None, name: str, default: int) -> int:
    v = (config or {}).get(name, default)
    return int(v) if v is not None else default


def occupancy(machine: Machine, config: dict, size: int, static: StaticFacts | None) -> int:
    """Resident CTAs (workgroups) per SM (CU) for a GEMM tile config."""
    bm, bn, bk = _cfg(config, "BLOCK_M", 128), _cfg(config, "BLOCK_N", 128), _cfg(config, "BLOCK_K", 64)
    warps, stages = _cfg(config, "num_warps", 4), _cfg(config, "num_stages", 3)
    lim = machine.limits
    if machine.vendor == "amd":
        lds = static.smem_bytes if static and static.smem_bytes else (bm * bk + bk * bn) * size * max(1, stages - 1)
        by_lds = int(lim.get("smem_per_unit", 65536) // max(lds, 512))
        vgprs = static.registers if static and static.registers else bm * bn // (64 * warps) + 64
        per_simd = min(8, int(512 // (math.ceil(vgprs / 8) * 8)))
        wpe = _cfg(config, "waves_per_eu", 0)
        if wpe > 0:
            per_simd = min(per_simd, wpe)
        by_waves = max(1, per_simd * 4 // warps)
        return max(1, min(by_lds, by_waves, 16))
    split = _cfg(config, "SPLIT_K", 1)
    epilogue = bm * (bn // 2 if config.get("EPILOGUE_SUBTILE") and split == 1 else bn) * (4 if split > 1 else size)
    epilogue *= 2 if config.get("WARP_SPECIALIZE") and warps == 4 else 1
    smem = static.smem_bytes if static and static.smem_bytes else (bm * bk + bk * bn) * size * stages + epilogue
    smem_blk = math.ceil((smem + 1024) / 128) * 128
    by_smem = int(lim.get("smem_per_unit", 228 * 1024) // smem_blk)
    regs = static.registers if static and static.registers else min(255, bm * bn // (32 * warps) + 40)
    per_warp = math.ceil(regs * 32 / 256) * 256
    by_regs = 4 * int((65536 // 4) // per_warp) // warps
    by_warps = int(lim.get("max_warps_per_unit", 64)) // warps
    return max(1, min(by_smem, by_regs, by_warps, int(lim.get("max_blocks_per_unit", 32))))


def gemm_terms(shape: dict, config: dict, machine: Machine, dtype: str, static: StaticFacts | None) -> dict[str, float]:
    shape = _work.normalize_shape("gemm", shape)
    m, n, k = int(shape["M"]), int(shape["N"]), int(shape["K"])
    batch = int(shape.get("batch") or 1)
    size = _work.dtype_bytes(dtype)
    bm, bn, bk = _cfg(config, "BLOCK_M", 128), _cfg(config, "BLOCK_N", 128), _cfg(config, "BLOCK_K", 64)
    stages = _cfg(config, "num_stages", 3)
    units = max(1, machine.units)
    split = _cfg(config, "SPLIT_K", 1)
    # split-K turns each output tile into SPLIT_K work items of ceil(k_tiles / SPLIT_K) K-steps
    tiles = batch * math.ceil(m / bm) * math.ceil(n / bn) * split
    k_iters = math.ceil(math.ceil(k / bk) / split)
    tiles_per_unit = math.ceil(tiles / units)  # the busiest SM: wave quantization
    occ = occupancy(machine, config, size, static)
    no_tensor_cores = static is not None and static.tensor_core_instructions == 0
    peak = machine.peak("float32" if no_tensor_cores else dtype)
    tile_flops = 2.0 * bm * bn * k_iters * bk
    w = _work.gemm(shape, config, dtype)
    bw = machine.bandwidth
    hbm_bw = bw.get("hbm", 1.0)
    # wgmma is 64 rows deep: a BLOCK_M tile issues BLOCK_M/64 instructions per K slice, each
    # reading its 64 rows of A and the whole BLOCK_K x BLOCK_N slice of B from shared memory
    operand_elems = bm * bk + max(1, math.ceil(bm / 64)) * bk * bn
    step_math = 2.0 * bm * bn * bk / (peak / units)
    step_load = (bm * bk + bk * bn) * size / (bw["l2"] / units) if "l2" in bw else 0.0
    step_latency = MEMORY_LATENCY_S / max(1, stages - 1)
    out_size = _work.dtype_bytes(shape.get("out_dtype") or dtype)
    t = {
        "compute": tiles_per_unit * tile_flops / (peak / units),
        "hbm": w.bytes["hbm"] / hbm_bw if "hbm" in bw else 0.0,
        "l2": w.bytes["l2"] / bw["l2"] if "l2" in bw else 0.0,
        "smem": tiles_per_unit * k_iters * operand_elems * size / (bw["smem"] / units) if "smem" in bw else 0.0,
        "latency": math.ceil(tiles_per_unit / occ) * k_iters * step_latency,
        "pipe": k_iters * max(tiles_per_unit * step_math, tiles_per_unit * step_load,
                              math.ceil(tiles_per_unit / occ) * step_latency),
        "tiles": math.ceil(tiles_per_unit / occ) * TILE_OVERHEAD_S,
        "splitk": (REDUCE_LAUNCH_S + batch * (split * m * n * 4 + m * n * out_size) / hbm_bw) if split > 1 else 0.0,
        "spill": (tiles_per_unit * k_iters * (static.spill_bytes if static else 0) * 32 * _cfg(config, "num_warps", 4)
                  / (bw.get("l2") or hbm_bw) * units),
        "launch": LAUNCH_S,
    }
    # the on-chip levels are not floors of their own here: operand panels shared by many tiles
    # hit in L2, and shared-memory reads overlap the math; they enter through smem and pipe
    t["roof"] = max(t["compute"], t["hbm"])
    return t


def generic_terms(op: str, shape: dict, config: dict, machine: Machine, dtype: str, extra: dict | None) -> dict[str, float]:
    w = _work.count(op, shape, config, extra)
    if w is None:
        raise ValueError(f"no work counter for op {op!r} (and no counted flops/bytes in the record)")
    t = dict.fromkeys((*TERMS, *DIAGNOSTICS), 0.0)
    t["compute"] = w.flops / machine.peak(dtype)
    for level in ("hbm", "l2", "smem"):
        if level in w.bytes and level in machine.bandwidth:
            t[level] = w.bytes[level] / machine.bandwidth[level]
    t["launch"] = LAUNCH_S
    t["roof"] = max(t["compute"], t["hbm"], t["l2"], t["smem"])
    return t


def terms(op: str, shape: dict, config: dict | None, machine: Machine, dtype: str | None = None,
          static: StaticFacts | None = None, extra: dict | None = None) -> dict[str, float]:
    dtype = str(dtype or _work.record_dtype(shape, config or {}, extra or {}))
    if op in _work.GEMM_OPS and config and "BLOCK_M" in config:
        t = gemm_terms(shape, config, machine, dtype, static)
    elif op in ATTENTION_OPS:
        t = _attention.terms(shape, config or {}, machine, dtype, LAUNCH_S)
    else:
        t = generic_terms(op, shape, config or {}, machine, dtype, extra)
    out = {name: float(t.get(name, 0.0)) for name in (*TERMS, *DIAGNOSTICS)}
    out["underfilled"] = float(_underfilled(op, shape, machine))
    return out


def _underfilled(op: str, shape: dict, machine: Machine) -> bool:
    """A GEMM whose output, in 128x128 tiles, does not cover every SM once: a latency-bound regime
    (skinny M) with its own coefficients, apart from the throughput-bound one."""
    if op not in _work.GEMM_OPS:
        return False
    s = _work.normalize_shape("gemm", shape)
    try:
        tiles = int(s.get("batch") or 1) * math.ceil(int(s["M"]) / 128) * math.ceil(int(s["N"]) / 128)
    except (KeyError, TypeError, ValueError):
        return False
    return tiles < max(1, machine.units)


def regime(t: dict[str, float]) -> str:
    return "underfilled" if t.get("underfilled") else "filled"


def _config_key(config: dict) -> str:
    # the dtype is a property of the problem, not of the kernel config
    return json.dumps({k: v for k, v in config.items() if k != "dtype"}, sort_keys=True, default=str)


def static_index(records: Iterable[Record]) -> dict[tuple[str, str, str], StaticFacts]:
    """Static facts per (op, target, config) from ``kind == "static"`` records."""
    fields: dict[tuple[str, str, str], dict[str, Any]] = defaultdict(dict)
    names = {"registers": "registers", "spill_bytes": "spill_bytes", "spills": "spill_bytes",
             "smem_bytes": "smem_bytes", "shared_bytes": "smem_bytes", "lds_bytes": "smem_bytes",
             "tensor_core_instructions": "tensor_core_instructions", "vgprs": "registers"}
    for r in records:
        if r.kind != "static" or r.metric not in names:
            continue
        target = _ceilings.devices.target_of(r.provenance.device)
        fields[(r.op, target, _config_key(r.config))][names[r.metric]] = int(r.value)
    return {key: StaticFacts(**f) for key, f in fields.items()}


@dataclass
class Sample:
    """One kernel timing, ready for the model."""

    device: str  # machine key
    op: str
    shape: dict
    config: dict
    dtype: str
    seconds: float
    terms: dict[str, float]
    record: Record | None = None

    @property
    def group(self) -> str:
        """The problem: the shape and the config keys that define the problem rather than the kernel
        (an attention's direction and causality are different problems, not configs to rank)."""
        shape = {k: v for k, v in self.shape.items() if k != "dtype"}
        shape.update({k: v for k, v in self.config.items() if k in PROBLEM_KEYS and k != "dtype"})
        return f"{self.device}|{self.op}|{_config_key(shape)}|{self.dtype}"

    @property
    def unit_op(self) -> str:
        return unit_op(self.op, self.shape, self.config)

    @property
    def unit(self) -> str:
        """The fit unit: "device|op" or "device|op|direction" (``ceiling.roofline.selection.unit_key``)."""
        return f"{self.device}|{self.unit_op}"


def unit_op(op: str, shape: dict | None, config: dict | None) -> str:
    """The op as the model keys its coefficients: with the problem's direction where it names one."""
    from ceiling.roofline.selection import direction

    d = direction(shape or {}, config or {})
    return f"{op}|{d}" if d else op


def machines_for(records: list[Record]) -> dict[str, Machine]:
    """A machine for every device that has ceilings (measured or published)."""
    return {key: from_ceilings(dc) for key, dc in _ceilings.fit(records).items()}


def samples(records: Iterable[Record], machines: dict[str, Machine] | None = None) -> list[Sample]:
    """Kernel timings from ``records`` with their model terms (records the model cannot place are skipped)."""
    records = list(records)
    machines = machines or machines_for(records)
    statics = static_index(records)
    out = []
    for r in records:
        if r.kind != "kernel" or r.metric != "time" or r.unit != "s":
            continue
        if not {k for k in r.config if k != "dtype"} or r.extra.get("status", "ok") != "ok":
            continue  # a library call without a config (the vendor baseline) or a failed run says nothing about configs
        spec = _ceilings.devices.match(r.provenance.device)
        key = spec.key if spec else r.provenance.device
        machine = machines.get(key)
        if machine is None:
            continue
        dtype = _work.record_dtype(r.shape, r.config, r.extra)
        target = spec.target if spec else ""
        static = statics.get((r.op, target, _config_key(r.config)))
        try:
            t = terms(r.op, r.shape, r.config, machine, dtype, static, r.extra)
        except ValueError:
            continue
        seconds = float(r.median if r.median is not None else r.value)
        if seconds > 0:
            out.append(Sample(key, r.op, _work.normalize_shape(r.op, r.shape), r.config, dtype, seconds, t, r))
    return out


@dataclass
class PerfModel:
    """Coefficients per fit unit ("device|op" or "device|op|direction", and "...|regime" for the GEMM
    shape classes); the analytic coefficients for everything else. ``op`` arguments below are unit ops
    (``unit_op``): "gemm", "attention|fwd"."""

    coefficients: dict[str, dict[str, float]] = field(default_factory=dict)  # unit -> term -> c
    fitted_on: dict[str, int] = field(default_factory=dict)  # unit -> number of samples

    def mode(self, device: str, op: str) -> str:
        return "fitted" if f"{device}|{op}" in self.coefficients else "analytic"

    def coefs(self, device: str, op: str, regime_: str | None = None) -> dict[str, float]:
        """The coefficients of one regime ("filled", "underfilled") where fitted, else of the op, else analytic."""
        if regime_ and f"{device}|{op}|{regime_}" in self.coefficients:
            return self.coefficients[f"{device}|{op}|{regime_}"]
        return self.coefficients.get(f"{device}|{op}", ANALYTIC)

    def predict_terms(self, device: str, op: str, t: dict[str, float]) -> Prediction:
        c = self.coefs(device, op, regime(t))
        return Prediction(sum(c.get(name, 0.0) * t[name] for name in TERMS), self.mode(device, op), t)

    def predict(self, op: str, shape: dict, config: dict | None, machine: Machine, dtype: str | None = None,
                static: StaticFacts | None = None) -> Prediction:
        return self.predict_terms(machine.key, unit_op(op, shape, config), terms(op, shape, config, machine, dtype, static))

    def to_json(self) -> dict:
        return {"terms": list(TERMS), "analytic": ANALYTIC, "coefficients": self.coefficients,
                "fitted_on": self.fitted_on}

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_json(), indent=2))

    @classmethod
    def load(cls, path: str | Path) -> "PerfModel":
        d = json.loads(Path(path).read_text())
        return cls(d.get("coefficients", {}), d.get("fitted_on", {}))


def problems(rows: Iterable[Sample]) -> int:
    return len({s.group for s in rows})


def fit(data: list[Sample], min_samples: int = 8, prior_weight: float = 0.05,
        min_problems: int = MIN_PROBLEMS) -> PerfModel:
    """Non-negative least squares on relative error, one coefficient set per fit unit, and one per
    GEMM regime (grid filled or not) where that regime has enough samples (``min_samples``: an op
    without tile configs has three live terms, launch, roof and hbm, so 8 timings pin them) from at
    least ``min_problems`` distinct problems (a unit with one or two problems is left analytic: its
    coefficients would describe those shapes' noise, not the kernel).

    The terms overlap (on most shapes the roof *is* one of the level terms), so
    a weak ridge pulls the coefficients toward the analytic ones; it settles
    ties the data cannot, and lets a model fit on memory-bound shapes still
    rank compute-bound ones by their roofline.
    """
    from scipy.optimize import nnls

    by_key: dict[str, list[Sample]] = defaultdict(list)
    for s in data:
        by_key[s.unit].append(s)
        if s.op == "gemm":
            by_key[f"{s.unit}|{regime(s.terms)}"].append(s)
    model = PerfModel()
    prior = np.array([ANALYTIC.get(name, 0.0) for name in TERMS])
    for key, rows in by_key.items():
        if len(rows) < min_samples or problems(rows) < min_problems:
            continue
        a = np.array([[s.terms[name] / s.seconds for name in TERMS] for s in rows])
        scale = a.max(axis=0)
        scale[scale == 0] = 1.0
        lam = prior_weight * math.sqrt(len(rows))
        system = np.vstack([a / scale, lam * np.eye(len(TERMS))])
        target = np.concatenate([np.ones(len(rows)), lam * prior * scale])
        coef, _ = nnls(system, target)
        model.coefficients[key] = {name: float(c / sc) for name, c, sc in zip(TERMS, coef, scale)}
        model.fitted_on[key] = len(rows)
    return model


def _spearman(x: np.ndarray, y: np.ndarray) -> float:
    if len(x) < 2:
        return float("nan")
    import pandas as pd

    rx, ry = pd.Series(x).rank().to_numpy(), pd.Series(y).rank().to_numpy()
    if rx.std() == 0 or ry.std() == 0:
        return float("nan")
    return float(np.corrcoef(rx, ry)[0, 1])


@dataclass
class Evaluation:
    mode: str  # "fitted" when any held-out prediction used fitted coefficients
    n_train: int
    n_test: int
    mape: float  # mean |pred - measured| / measured over held-out samples
    spearman: float  # mean within-shape rank correlation (configs ranked on one shape)
    spearman_global: float  # over every held-out sample
    regret: float  # mean over held-out shapes of measured(model's pick) / measured best - 1
    regret_max: float
    groups: int
    split: str
    noise: float = float("nan")  # median (p80 - p20) / median of the held-out timings: the floor any model meets
    method: str = ""  # the timing method of the records fit and judged on
    excluded: dict[str, int] = field(default_factory=dict)  # reason (ceiling.roofline.selection.REASONS) -> records left out
    note: str = ""  # why the unit was not fit, where it was not

    def meets(self, mape: float = 0.10, spearman: float = 0.9, regret: float = 0.05) -> bool:
        # no regret where no held-out problem has two configs to choose between
        return self.mape <= mape and self.spearman >= spearman and (self.regret <= regret or self.regret != self.regret)

    def as_dict(self) -> dict:
        return asdict(self)


def split(data: list[Sample], test_fraction: float = 0.25, seed: int = 0) -> tuple[list[Sample], list[Sample], str]:
    """Hold out whole shapes (the model must rank configs on shapes it never saw).

    Falls back to holding out random samples when there are fewer than 4 shapes.
    """
    rng = random.Random(seed)
    groups = sorted({s.group for s in data})
    if len(groups) >= 4:
        held = set(rng.sample(groups, max(1, round(test_fraction * len(groups)))))
        return [s for s in data if s.group not in held], [s for s in data if s.group in held], "held-out shapes"
    idx = list(range(len(data)))
    rng.shuffle(idx)
    cut = max(1, round(test_fraction * len(data)))
    test = set(idx[:cut])
    return [s for i, s in enumerate(data) if i not in test], [s for i, s in enumerate(data) if i in test], "held-out samples"


def evaluate_on(model: PerfModel, test: list[Sample], n_train: int = 0, how: str = "") -> Evaluation:
    pred = [model.predict_terms(s.device, s.unit_op, s.terms).seconds for s in test]
    modes = {model.mode(s.device, s.unit_op) for s in test}
    return metrics(test, pred, "fitted" if "fitted" in modes else "analytic", n_train, how)


def metrics(test: list[Sample], predicted: list[float], mode: str, n_train: int = 0, how: str = "") -> Evaluation:
    """MAPE, within-shape Spearman and top-1 regret of ``predicted`` against the measured times."""
    if not test:
        nan = float("nan")
        return Evaluation(mode, n_train, 0, nan, nan, nan, nan, nan, 0, how)
    pred = np.asarray(predicted, dtype=float)
    meas = np.array([s.seconds for s in test])
    by_group: dict[str, list[int]] = defaultdict(list)
    for i, s in enumerate(test):
        by_group[s.group].append(i)
    rhos, regrets = [], []
    for idx in by_group.values():
        if len(idx) >= 3:
            r = _spearman(pred[idx], meas[idx])
            if r == r:
                rhos.append(r)
        if len(idx) >= 2:
            # configs the model cannot tell apart are a coin toss: the expected regret over the tie
            best = pred[idx].min()
            picks = [i for i in idx if pred[i] <= best * (1 + 1e-9)]
            regrets.append(float(np.mean(meas[picks])) / meas[idx].min() - 1.0)
    return Evaluation(
        mode=mode,
        n_train=n_train,
        n_test=len(test),
        mape=float(np.mean(np.abs(pred - meas) / meas)),
        spearman=float(np.mean(rhos)) if rhos else _spearman(pred, meas),
        spearman_global=_spearman(pred, meas),
        regret=float(np.mean(regrets)) if regrets else float("nan"),
        regret_max=float(np.max(regrets)) if regrets else float("nan"),
        groups=len(by_group),
        split=how,
        noise=_noise(test),
    )


def _noise(test: list[Sample]) -> float:
    spreads = [(s.record.p80 - s.record.p20) / s.seconds for s in test
               if s.record is not None and s.record.p20 is not None and s.record.p80 is not None]
    return float(np.median(spreads)) if spreads else float("nan")


def _cross_predict(rows: list[Sample], folds: int, seed: int, min_samples: int):
    """Every shape held out once: the held-out samples, their predictions, the modes used, the
    mean training-set size and how the folds were made."""
    rng = random.Random(seed)
    groups = sorted({s.group for s in rows})
    rng.shuffle(groups)
    if len(groups) >= 2:
        k = min(folds, len(groups))
        fold_of = {g: i % k for i, g in enumerate(groups)}
        assign = [fold_of[s.group] for s in rows]
        how = f"{k}-fold over {len(groups)} shapes (each shape held out once)"
    else:
        k = min(folds, len(rows))
        assign = [i % k for i in rng.sample(range(len(rows)), len(rows))]
        how = f"{k}-fold over samples of one shape"
    test: list[Sample] = []
    pred: list[float] = []
    modes = set()
    trained = 0
    for f in range(k):
        train = [s for s, a in zip(rows, assign) if a != f]
        held = [s for s, a in zip(rows, assign) if a == f]
        model = fit(train, min_samples)
        trained += len(train)
        test.extend(held)
        pred.extend(model.predict_terms(s.device, s.unit_op, s.terms).seconds for s in held)
        modes.update(model.mode(s.device, s.unit_op) for s in held)
    return test, pred, "fitted" if "fitted" in modes else "analytic", round(trained / max(k, 1)), how


def cross_validate(rows: list[Sample], folds: int = 4, seed: int = 0, min_samples: int = 8) -> Evaluation:
    """Every shape held out once: fit on the other folds of shapes, predict the held-out fold, pool.

    With fewer than ``folds`` shapes, each shape is its own fold (leave one shape out);
    with a single shape, random samples are held out instead.
    """
    test, pred, mode, trained, how = _cross_predict(rows, folds, seed, min_samples)
    return metrics(test, pred, mode, trained, how)


def too_few(rows: list[Sample], min_samples: int = 8, min_problems: int = MIN_PROBLEMS) -> str:
    """Why a unit's records cannot be fit and judged on held-out problems, or "" when they can:
    every fold's fit needs ``min_problems`` problems with one more held out."""
    n = problems(rows)
    if n >= min_problems + 1 and len(rows) >= min_samples:
        return ""
    return (f"too few records to fit: {len(rows)} timing(s) of {n} problem(s); a fit needs {min_problems} "
            f"problems and {min_samples} timings, with one more problem held out to judge it; "
            f"the analytic terms are used")


def fit_and_evaluate(records: Iterable[Record], folds: int = 4, seed: int = 0,
                     min_samples: int = 8) -> tuple[PerfModel, dict[str, Evaluation]]:
    """Judge the model per fit unit on held-out shapes (cross-validated), then fit on everything.

    Only the timings ``ceiling.roofline.selection.select`` keeps enter (our kernels, device time, one
    timing method per fit unit). Returns the model fit on all of them and the held-out
    evaluation per unit ("device|op" or "device|op|direction") and per "unit|shape class"
    (the GEMM regimes), each with the counts of records used and excluded and why, and
    a note where a unit has too few problems to be fit.
    """
    from ceiling.roofline import selection as _selection

    records = list(records)
    chosen = _selection.select(records)
    machines = machines_for(records)
    data = samples(chosen.used + [r for r in records if r.kind == "static"], machines)
    placed = {id(s.record) for s in data}
    chosen.excluded += [_selection.Excluded(r, "no-terms") for r in chosen.used if id(r) not in placed]
    by_key: dict[str, list[Sample]] = defaultdict(list)
    for s in data:
        by_key[s.unit].append(s)
    excluded: dict[str, Counter] = defaultdict(Counter)
    for e in chosen.excluded:
        key = _selection.unit_key(e.record)
        excluded[key][e.reason] += 1
        machine = machines.get(_selection.device_key(e.record))
        if machine is not None and e.record.op == "gemm":
            part = "underfilled" if _underfilled(e.record.op, e.record.shape, machine) else "filled"
            excluded[f"{key}|{part}"][e.reason] += 1
    evaluations = {}
    usable: list[Sample] = []
    for key, rows in sorted(by_key.items()):
        note = too_few(rows, min_samples)
        if not note:
            usable.extend(rows)
        test, pred, mode, trained, how = _cross_predict(rows, folds, seed, min_samples)
        parts = [("", list(range(len(test))))]
        for part in ("filled", "underfilled"):  # the shape classes of a GEMM, judged on the same predictions
            idx = [i for i, s in enumerate(test) if s.op == "gemm" and regime(s.terms) == part]
            if idx:
                parts.append((f"|{part}", idx))
        for suffix, idx in parts:
            e = metrics([test[i] for i in idx], [pred[i] for i in idx], mode, trained, how)
            e.method = chosen.methods.get(key, "")
            e.excluded = dict(excluded.get(key + suffix, {}))
            e.note = note
            evaluations[key + suffix] = e
    return fit(usable, min_samples), evaluations
