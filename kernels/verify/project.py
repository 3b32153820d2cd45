"""The project's own contracts, written next to the launchers they describe: each entry names the kernel,
the target it is launched for, its grid and buffers as the launcher builds them, and the domain of its
integer arguments over the op's spec and the configs its space allows. ``tests/test_verify_project.py``
runs each launcher under the interpreter and checks the grid and buffers it really launches against the
contract, so the two cannot drift. ``ceiling verify --all`` verifies every entry."""

from __future__ import annotations

from dataclasses import dataclass

from ceiling.verify import contract as contracts

# The sizes a GEMM may have here: any M and N up to 2^17 (a 2^34-element output, well past the i32
# range of element offsets); the split-K reduction exists for every SPLIT_K the space's search offers.
_SIZE = [1, 2**17]
_SPLIT_K = [2, 4]


# Config keys whose constexpr has another name (the attention configs' lowercase knobs).
_CONSTEXPR = {"block_m": "BLOCK_M", "block_n": "BLOCK_N", "dq_atomic": "DQ_ATOMIC"}


@dataclass(frozen=True)
class Entry:
    """One contract: a name, where its kernel lives, its TOML-shaped body, the kernel family (spaces) it
    belongs to, the config section its kernel reads (sectioned families: one section per kernel), when a
    config launches it (a condition over the section's keys), and which of those keys are its constexprs
    (a point's values replace the contract's). An entry with no family is verified by ``--all`` only:
    import-point and the search adapters consult the entries of a family."""
    name: str
    module: str
    kernel: str
    body: dict
    family: str = ""
    section: str = ""
    applies: str = ""  # empty: whenever the point sets the entry's section (or always, unsectioned)
    point_keys: tuple = ()
    # Properties the verifier cannot decide for this kernel (answered unknown, with the reason), by name.
    unknown: tuple = ()
    # Properties whose queries need more than the default time (SLOW_TIMEOUT_MS each).
    slow: tuple = ()

    @property
    def target(self) -> str:
        return self.body["targets"][0]

    def values(self, point: dict | None) -> dict | None:
        """The keys of ``point`` (flat ``section.KEY`` names or nested sections) this entry's kernel reads,
        by their names in its section; None when the point holds nothing of a sectioned entry's section."""
        flat = {}
        for k, v in (point or {}).items():
            if isinstance(v, dict):
                flat.update({f"{k}.{kk}": vv for kk, vv in v.items()})
            else:
                flat[k] = v
        if not self.section:
            return {k: v for k, v in flat.items() if "." not in k}
        prefix = self.section + "."
        mine = {k[len(prefix):]: v for k, v in flat.items() if k.startswith(prefix)}
        return mine or None

    def constexprs(self, point: dict | None) -> dict:
        """The constexprs ``point`` sets for this kernel to other values than the contract's own (a point at
        the contract's values is the contract: one proof, one cache entry)."""
        values = self.values(point) or {}
        out = {_CONSTEXPR.get(k, k): values[k] for k in self.point_keys if k in values}
        return {k: v for k, v in out.items() if self.body["constexprs"].get(k) != [v]}

    def contract(self, point: dict | None = None) -> contracts.Contract:
        import importlib

        fn = getattr(importlib.import_module(self.module), self.kernel)
        body = dict(self.body)
        if point:
            body["constexprs"] = {**body["constexprs"], **{k: [v] for k, v in self.constexprs(point).items()}}
        return contracts.from_dict({"kernel": f"{self.module}:{self.kernel}", "name": self.name, **body}, fn=fn)

    def launched_by(self, point: dict) -> bool:
        values = self.values(point)
        if values is None:
            return False
        if not self.applies:
            return True
        env = {k: v for k, v in values.items() if isinstance(v, (int, bool))}
        try:
            return bool(contracts.parse_expr(self.applies, f"{self.name}.applies", condition=True).value(env))
        except contracts.ContractError:  # the point lacks a key the condition reads: not this kernel's
            return False


def _fp8_constants() -> dict:
    import triton.language as tl

    return {"FP8": [tl.float8e4nv], "FP8_MAX": [448.0], "HAS_INF": [False], "NAN_CODE": [0x7F], "POW2": [False]}


def _fp8_groups(target: str, tile: bool, transposed: bool) -> Entry:
    """kernels/triton/fp8_quantize.py's quantize_groups_kernel as ``quantize`` launches it: 1x128 groups
    (BLOCK_R = 32, scales stored column-major) or 128x128 tiles (scales row-major), reading ``x`` or
    ``x.T`` through its strides, e4m3 codes written as bytes; grid (cdiv(R, BLOCK_R), cdiv(C, 128))."""
    x_strides = ["1", "R"] if transposed else ["C", "1"]
    s_strides = ["cdiv(C, 128)", "1"] if tile else ["1", "R"]
    name = f"fp8_quantize.{'128x128' if tile else '1x128'}{'.transposed' if transposed else ''}"
    return Entry(name, "ceiling.triton.fp8_quantize", "quantize_groups_kernel", body={
        "targets": [target],
        "grid": ["cdiv(R, BLOCK_R)", "cdiv(C, 128)"],
        "scalars": {"R": _SIZE, "C": _SIZE, "stride_xr": x_strides[0], "stride_xc": x_strides[1], "stride_qr": "C",
                    "stride_qc": 1, "stride_sr": s_strides[0], "stride_sc": s_strides[1]},
        "constexprs": {"BLOCK_R": [128 if tile else 32], "ONE_SCALE_PER_TILE": [tile], **_fp8_constants()},
        "buffers": {"x_ptr": {"shape": ["R", "C"], "strides": ["stride_xr", "stride_xc"], "dtype": "bfloat16"},
                    "q_ptr": {"shape": ["R", "C"], "strides": ["stride_qr", "stride_qc"], "dtype": "uint8",
                              "output": True},
                    "s_ptr": {"shape": ["cdiv(R, 128)" if tile else "R", "cdiv(C, 128)"],
                              "strides": ["stride_sr", "stride_sc"], "dtype": "float32", "output": True}}})


def _fp8_rows(target: str) -> Entry:
    """quantize_rows_kernel as ``quantize(x, "row")`` launches it: one scale per row (scales (R, 1)),
    two sweeps of 128-column blocks; grid (cdiv(R, 32),)."""
    return Entry("fp8_quantize.row", "ceiling.triton.fp8_quantize", "quantize_rows_kernel", body={
        "targets": [target],
        "grid": ["cdiv(R, BLOCK_R)"],
        "scalars": {"R": _SIZE, "C": _SIZE, "stride_xr": "C", "stride_xc": 1, "stride_qr": "C", "stride_qc": 1,
                    "stride_sr": 1},
        "constexprs": {"BLOCK_R": [32], "BLOCK_C": [128], **_fp8_constants()},
        "buffers": {"x_ptr": {"shape": ["R", "C"], "strides": ["stride_xr", "stride_xc"], "dtype": "bfloat16"},
                    "q_ptr": {"shape": ["R", "C"], "strides": ["stride_qr", "stride_qc"], "dtype": "uint8",
                              "output": True},
                    "s_ptr": {"shape": ["R", 1], "strides": ["stride_sr", 1], "dtype": "float32", "output": True}}})


# The partial maxima of the tensor-wise quantizer: NUM_PROGRAMS is min(264, tiles) on a GPU (3 under the
# interpreter), its buffer the next power of two wide (zeros past NUM_PROGRAMS); the extremes and a middle.
_AMAX_PROGRAMS = [1, 3, 100, 264]


def _fp8_tensor(target: str) -> tuple:
    """amax_partials_kernel then quantize_tensor_kernel as ``quantize(x, "tensor")`` launches them: 64x128
    tiles, one scale (a 0-d tensor) stored by program (0, 0)."""
    x = {"shape": ["R", "C"], "strides": ["stride_xr", "stride_xc"], "dtype": "bfloat16"}
    partials = Entry("fp8_quantize.tensor.amax", "ceiling.triton.fp8_quantize", "amax_partials_kernel",
                     unknown=("coverage",), body={
        "targets": [target],
        "grid": ["NUM_PROGRAMS"],
        "sizes": {"WIDTH": [1, 512]},
        "scalars": {"R": _SIZE, "C": _SIZE, "stride_xr": "C", "stride_xc": 1},
        "constexprs": {"NUM_PROGRAMS": _AMAX_PROGRAMS, "BLOCK_R": [64], "BLOCK_C": [128]},
        "assume": {"conditions": ["WIDTH >= NUM_PROGRAMS", "WIDTH < 2 * NUM_PROGRAMS"]},
        # not an output: the entries past NUM_PROGRAMS stay the zeros they were allocated with
        "buffers": {"x_ptr": x, "partial_ptr": {"shape": ["WIDTH"], "dtype": "float32"}}})
    codes = Entry("fp8_quantize.tensor", "ceiling.triton.fp8_quantize", "quantize_tensor_kernel", body={
        "targets": [target],
        "grid": ["cdiv(R, BLOCK_R)", "cdiv(C, BLOCK_C)"],
        "scalars": {"R": _SIZE, "C": _SIZE, "stride_xr": "C", "stride_xc": 1, "stride_qr": "C", "stride_qc": 1},
        "constexprs": {"NUM_PARTIALS": [1, 4, 128, 512], "BLOCK_R": [64], "BLOCK_C": [128], **_fp8_constants()},
        "buffers": {"x_ptr": x,
                    "q_ptr": {"shape": ["R", "C"], "strides": ["stride_qr", "stride_qc"], "dtype": "uint8",
                              "output": True},
                    "s_ptr": {"shape": [], "dtype": "float32", "output": True},
                    "partial_ptr": {"shape": ["NUM_PARTIALS"], "dtype": "float32"}}})
    return partials, codes


# The triangle multiplicative update's pair problem: a batch of N x N pairs with c_z and c channels (the
# widths the block constexprs pad to a power of two: 128, the models' width). eps only scales values, so it is
# compiled as the constant the op defaults to.
_TRIMUL_SIZES = {"BATCH": [1, 8], "N": [1, 4096]}
_TRIMUL_WIDTHS = {"CZ_BLOCK": [128], "C_BLOCK": [128]}
_TRIMUL_MODULE = "ceiling.triton.triangle_multiplication"


def _trimul_section(section: str, *keys: str) -> dict:
    """The Entry fields of a trimul kernel: its config section, whose BLOCK_M and ``keys`` are constexprs."""
    return {"family": "triangle_multiplication", "section": section, "point_keys": ("BLOCK_M", *keys)}


def _trimul(target: str) -> tuple:
    """The forward's three kernels as kernels/triton/triangle_multiplication.py launches them: LayerNorm +
    gated projection to ab (BATCH, 2c, N, N) channel-first, the per-channel N x N products (outgoing
    a b^T and incoming a^T b, b the second half of ab), and LayerNorm_out + output gating."""
    rows = {"M": "BATCH * N * N", "NN": "N * N"}
    pair = {"shape": ["BATCH", "N", "N", "CZ"], "dtype": "bfloat16"}
    vec = lambda n: {"shape": [n], "dtype": "bfloat16"}  # noqa: E731
    common = {"PRECISION": ["tf32"], "eps": [1e-5]}
    # coverage: the stored offset splits the row index into (batch, pair) by a division, so the tile
    # argument does not apply; z3 times out on the quantified query
    gate = Entry("trimul.ln_gate_proj", _TRIMUL_MODULE, "ln_gate_proj_kernel", unknown=("coverage",),
                 **_trimul_section("ln_gate_proj", "BLOCK_N"), body={
        "targets": [target],
        "grid": ["cdiv(M, BLOCK_M) * cdiv(C2, BLOCK_N)"],
        "sizes": _TRIMUL_SIZES,
        "scalars": {**rows, "CZ": [65, 128], "C2": [130, 256]},
        "constexprs": {"HAS_MASK": [True], "BLOCK_M": [64], "BLOCK_N": [64], "CZ_BLOCK": [128], **common},
        "assume": {"conditions": ["C2 % 2 == 0"]},
        "buffers": {"X": pair, "Mask": {"shape": ["M"], "dtype": "float32"}, "Lw": vec("CZ"), "Lb": vec("CZ"),
                    "Wp": {"shape": ["C2", "CZ"], "dtype": "bfloat16"}, "Bp": vec("C2"),
                    "Wg": {"shape": ["C2", "CZ"], "dtype": "bfloat16"}, "Bg": vec("C2"),
                    "AB": {"shape": ["BATCH", "C2", "N", "N"], "dtype": "bfloat16", "output": True}}})
    # coverage is proved on the (BATCH * N * N, CZ) view of the output, which the kernel's rows index
    out = Entry("trimul.ln_out_gate", _TRIMUL_MODULE, "ln_out_gate_kernel", **_trimul_section("ln_out_gate", "BLOCK_N"),
                body={
        "targets": [target],
        "grid": ["cdiv(M, BLOCK_M) * cdiv(CZ, BLOCK_N)"],
        "sizes": _TRIMUL_SIZES,
        "scalars": {**rows, "CZ": [65, 128], "C": [65, 128]},
        "constexprs": {"BLOCK_M": [64], "BLOCK_N": [32], **_TRIMUL_WIDTHS, **common},
        "buffers": {"X": pair, "Yc": {"shape": ["BATCH", "C", "N", "N"], "dtype": "bfloat16"},
                    "Lw_in": vec("CZ"), "Lb_in": vec("CZ"), "Lw_out": vec("C"), "Lb_out": vec("C"),
                    "Wpo": {"shape": ["CZ", "C"], "dtype": "bfloat16"}, "Bpo": vec("CZ"),
                    "Wgo": {"shape": ["CZ", "CZ"], "dtype": "bfloat16"}, "Bgo": vec("CZ"),
                    "Out": {**pair, "output": True}}})
    products = []
    for direction in ("outgoing", "incoming"):
        # a = ab[:, :c] and b = ab[:, c:], each (batch, chan, row, col) strides into ab (BATCH, 2c, N, N)
        row_col = ["N", "1"] if direction == "outgoing" else ["1", "N"]
        plane = {"a_batch": "2 * C * N * N", "a_chan": "N * N", "b_batch": "2 * C * N * N", "b_chan": "N * N"}
        products.append(Entry(f"trimul.contract.{direction}", _TRIMUL_MODULE, "channel_gemm_kernel",
                              **_trimul_section("contract", "BLOCK_N", "BLOCK_K"), body={
            "targets": [target],
            "grid": ["cdiv(N, BLOCK_M)", "cdiv(N, BLOCK_N)", "BATCH * C"],
            "sizes": {"BATCH": [1, 8]},
            "scalars": {"N": [1, 4096], "C": [1, 128], **plane, "s_am": row_col[0], "s_ak": row_col[1],
                        "s_bk": row_col[1], "s_bn": row_col[0], "y_batch": "C * N * N", "y_chan": "N * N",
                        "s_ym": "N", "s_yn": 1},
            "constexprs": {"PRECISION": ["tf32"], "BLOCK_M": [128], "BLOCK_N": [128], "BLOCK_K": [32]},
            "buffers": {"A": {"shape": ["BATCH", "C", "N", "N"], "strides": ["a_batch", "a_chan", "N", 1],
                              "dtype": "bfloat16"},
                        "B": {"shape": ["BATCH", "C", "N", "N"], "strides": ["b_batch", "b_chan", "N", 1],
                              "dtype": "bfloat16"},
                        "Y": {"shape": ["BATCH", "C", "N", "N"], "dtype": "bfloat16", "output": True}}}))
    return gate, *products, out


# The backward's row kernels take the pair rows [row0, row0 + M_rows) of M = BATCH * N * N per launch (the
# launcher's chunks of bwd_rows rows): the chunk's own buffers are outputs; the pair-sized ones they write a
# window of (dgz, dy, dx) are not, since a launch stores only its rows (bounds and race are proved on them;
# the chunks tiling [0, M) is the launcher's loop).
_TRIMUL_WINDOW = {"row0": [0, 8 * 4096 * 4096 - 1], "M_rows": [1, 8 * 4096 * 4096], "NN": "N * N"}
_TRIMUL_BWD_SIZES = {**_TRIMUL_SIZES, "M": "BATCH * N * N"}


def _trimul_bwd(target: str) -> tuple:
    """The backward's kernels as kernels/triton/triangle_multiplication.py launches them: the output gating's
    backward (d_u, d_gz, and yn, xn for the weight gradients), LayerNorm_out's backward (dy channel-first
    and the parameter gradients' partials per program), and the input stage's (dx, dP, dG, xn, partials);
    then the per-channel products of the contraction's backward, da and db into one (BATCH, 2c, N, N)
    buffer."""
    pair = {"shape": ["BATCH", "N", "N", "CZ"], "dtype": "bfloat16"}
    vec = lambda n: {"shape": [n], "dtype": "bfloat16"}  # noqa: E731
    rows = lambda n: {"shape": ["M_rows", n], "dtype": "bfloat16", "output": True}  # noqa: E731
    common = {"PRECISION": ["tf32"], "eps": [1e-5]}
    window = {"assume": {"conditions": ["row0 + M_rows <= M"]}, "sizes": _TRIMUL_BWD_SIZES}
    out_gate = Entry("trimul.out_gate_bwd", _TRIMUL_MODULE, "out_gate_bwd_kernel",
                     **_trimul_section("out_gate_bwd", "BLOCK_N"), body={
        "targets": [target],
        "grid": ["cdiv(M_rows, BLOCK_M)"], **window,
        "scalars": {**_TRIMUL_WINDOW, "CZ": [65, 128], "C": [65, 128]},
        "constexprs": {"BLOCK_M": [64], "BLOCK_N": [64], **_TRIMUL_WIDTHS, **common},
        "buffers": {"X": pair, "Yc": {"shape": ["BATCH", "C", "N", "N"], "dtype": "bfloat16"}, "DOut": pair,
                    "Lw_in": vec("CZ"), "Lb_in": vec("CZ"), "Lw_out": vec("C"), "Lb_out": vec("C"),
                    "Wpo": {"shape": ["CZ", "C"], "dtype": "bfloat16"}, "Bpo": vec("CZ"),
                    "Wgo": {"shape": ["CZ", "CZ"], "dtype": "bfloat16"}, "Bgo": vec("CZ"),
                    "DU": rows("CZ"), "DGz": {"shape": ["M", "CZ"], "dtype": "bfloat16"},
                    "Yn": rows("C"), "Xn": rows("CZ")}})
    ln_out = Entry("trimul.ln_out_bwd", _TRIMUL_MODULE, "ln_out_bwd_kernel", **_trimul_section("ln_out_bwd", "BLOCK_K"),
                   body={
        "targets": [target],
        "grid": ["cdiv(M_rows, BLOCK_M)"], **window,
        "scalars": {**_TRIMUL_WINDOW, "CZ": [65, 128], "C": [65, 128]},
        "constexprs": {"BLOCK_M": [32], "BLOCK_K": [32], "C_BLOCK": [128], **common},
        "buffers": {"Yc": {"shape": ["BATCH", "C", "N", "N"], "dtype": "bfloat16"},
                    "DU": {"shape": ["M_rows", "CZ"], "dtype": "bfloat16"}, "Lw_out": vec("C"), "Lb_out": vec("C"),
                    "Wpo": {"shape": ["CZ", "C"], "dtype": "bfloat16"},
                    "DYc": {"shape": ["BATCH", "C", "N", "N"], "dtype": "bfloat16"},
                    "Part": {"shape": ["cdiv(M_rows, BLOCK_M)", 2, "C"], "dtype": "float32", "output": True}}})
    gate = Entry("trimul.ln_gate_proj_bwd", _TRIMUL_MODULE, "ln_gate_proj_bwd_kernel",
                 **_trimul_section("ln_gate_proj_bwd", "BLOCK_N"), body={
        "targets": [target],
        "grid": ["cdiv(M_rows, BLOCK_M)"], **window,
        "scalars": {**_TRIMUL_WINDOW, "CZ": [65, 128], "C2": [130, 256]},
        "constexprs": {"HAS_MASK": [True], "BLOCK_M": [64], "BLOCK_N": [32], "CZ_BLOCK": [128], **common},
        "assume": {"conditions": ["row0 + M_rows <= M", "C2 % 2 == 0"]},
        "buffers": {"X": pair, "Mask": {"shape": ["M"], "dtype": "float32"},
                    "DABc": {"shape": ["BATCH", "C2", "N", "N"], "dtype": "bfloat16"},
                    "DGz": {"shape": ["M", "CZ"], "dtype": "bfloat16"}, "Lw": vec("CZ"), "Lb": vec("CZ"),
                    "Wp": {"shape": ["C2", "CZ"], "dtype": "bfloat16"}, "Bp": vec("C2"),
                    "Wg": {"shape": ["C2", "CZ"], "dtype": "bfloat16"}, "Bg": vec("C2"),
                    "Wgo": {"shape": ["CZ", "CZ"], "dtype": "bfloat16"}, "DX": pair,
                    "DP": rows("C2"), "DG": rows("C2"), "Xn": rows("CZ"),
                    "Part": {"shape": ["cdiv(M_rows, BLOCK_M)", 2, "CZ"], "dtype": "float32", "output": True}}})
    products = []
    # (name, A's (batch, chan, row, col) strides, B's, which of them is dy): da = dy b or b dy^T, db = dy^T a
    # or a dy; dy is (BATCH, C, N, N), the ab halves and dab's are planes of (BATCH, 2c, N, N)
    half = ["2 * C * N * N", "N * N", "N", 1]
    dy, dy_t = ["C * N * N", "N * N", "N", 1], ["C * N * N", "N * N", 1, "N"]
    for name, a, b, dy_is in (("outgoing.da", dy, half, "A"), ("outgoing.db", dy_t, half, "A"),
                              ("incoming.da", half, dy_t, "B"), ("incoming.db", half, dy, "B")):
        operand = lambda is_dy: {"shape": ["BATCH", "C", "N", "N"], "dtype": "bfloat16",  # noqa: E731
                                 "strides": dy if is_dy else half}
        products.append(Entry(f"trimul.contract_bwd.{name}", _TRIMUL_MODULE, "channel_gemm_kernel",
                              **_trimul_section("contract", "BLOCK_N", "BLOCK_K"), body={
            "targets": [target],
            "grid": ["cdiv(N, BLOCK_M)", "cdiv(N, BLOCK_N)", "BATCH * C"],
            "sizes": {"BATCH": [1, 8]},
            "scalars": {"N": [1, 4096], "C": [1, 128], "a_batch": a[0], "a_chan": a[1], "s_am": a[2], "s_ak": a[3],
                        "b_batch": b[0], "b_chan": b[1], "s_bk": b[2], "s_bn": b[3], "y_batch": half[0],
                        "y_chan": half[1], "s_ym": "N", "s_yn": 1},
            "constexprs": {"PRECISION": ["tf32"], "BLOCK_M": [128], "BLOCK_N": [128], "BLOCK_K": [32]},
            "buffers": {"A": operand(dy_is == "A"), "B": operand(dy_is == "B"),
                        "Y": {"shape": ["BATCH", "C", "N", "N"], "strides": half, "dtype": "bfloat16",
                              "output": True}}}))
    return out_gate, ln_out, gate, *products


def _gemm_pointer(batched: bool) -> Entry:
    """kernels/nvidia/gemm_jax.py's gemm_kernel_jax: the persistent Hopper GEMM on plain pointers (the path
    jax-triton launches), contiguous A (BATCH, M, K) and B (BATCH, K, N), NUM_SMS programs striding over the
    tiles (132 on an H100/H200, fewer when the problem has fewer tiles)."""
    lead = ["BATCH"] if batched else []
    return Entry("gemm.persistent.pointer" + (".batched" if batched else ""), "ceiling.nvidia.gemm_jax",
                 "gemm_kernel_jax", unknown=("race", "coverage"), body={
        "targets": ["sm_90a"],
        "grid": ["NUM_SMS"],
        "scalars": {"M": _SIZE, "N": _SIZE, "K": _SIZE, "BATCH": [1, 64] if batched else 1, "PLANE_ROWS": "M",
                    "stride_ab": "M * K", "stride_am": "K", "stride_ak": 1, "stride_bb": "K * N", "stride_bk": "N",
                    "stride_bn": 1, "stride_cb": "M * N", "stride_cm": "N"},
        "constexprs": {"BATCHED": [batched], "HAS_BIAS": [True], "ACTIVATION": ["gelu"], "BLOCK_M": [128],
                       "BLOCK_N": [128], "BLOCK_K": [64], "GROUP_M": [8], "NUM_SMS": [132],
                       "EPILOGUE_SUBTILE": [False], "WARP_SPECIALIZE": [False], "SPLIT_K": [1]},
        "buffers": {"a": {"shape": lead + ["M", "K"], "dtype": "bfloat16"},
                    "b": {"shape": lead + ["K", "N"], "dtype": "bfloat16"},
                    "bias_ptr": {"shape": ["N"], "dtype": "bfloat16"},
                    "c": {"shape": lead + ["M", "N"], "dtype": "bfloat16", "output": True}}})


# What the CDNA3 GEMM's launcher requires for 32-bit tile offsets (kernels/amd/gemm.py large_offsets): A, B
# and the output's whole tiles (the last ones running past M and N) span fewer than 2^31 elements.
_I32_SPANS = ("M * K < 2147483648 and K * N < 2147483648 and "
              "(cdiv(M, BLOCK_M) * BLOCK_M - 1) * N + cdiv(N, BLOCK_N) * BLOCK_N < 2147483648")


def _amd_gemm() -> Entry:
    """kernels/amd/gemm.py's gemm_kernel on contiguous 2-D operands with SPLIT_K = 1 (the output written
    directly), grid (cdiv(M, BLOCK_M) * cdiv(N, BLOCK_N),) renumbered across the XCDs; EVEN_K when BLOCK_K
    divides K; 32-bit tile offsets (LARGE_OFFSETS False: every operand spans fewer than 2^31 elements), K not
    a multiple of BLOCK_K. Bounds and overflow are proved; race and coverage are unknown: the XCD
    renumbering of the program id and the grouped tile order leave z3 timing out on distinct programs'
    tiles."""
    return Entry("gemm.cdna3", "ceiling.amd.gemm", "gemm_kernel", unknown=("race", "coverage"),
                 body={
        "targets": ["gfx942"],
        "grid": ["cdiv(M, BLOCK_M) * cdiv(N, BLOCK_N)"],
        "scalars": {"M": _SIZE, "N": _SIZE, "K": _SIZE, "K_PER_SPLIT": "cdiv(K, BLOCK_K) * BLOCK_K",
                    "stride_ab": 0, "stride_am": "K", "stride_ak": 1, "stride_bb": 0, "stride_bk": "N",
                    "stride_bn": 1, "stride_cs": 0, "stride_cb": "M * N", "stride_cm": "N", "stride_cn": 1},
        "constexprs": {"BLOCK_M": [256], "BLOCK_N": [256], "BLOCK_K": [64], "GROUP_M": [4], "SPLIT_K": [1],
                       "NUM_XCDS": [8], "EVEN_K": [False], "HAS_BIAS": [True], "ACTIVATION": [2],
                       "INPUT_PRECISION": ["ieee"], "LARGE_OFFSETS": [False]},
        "assume": {"conditions": [_I32_SPANS]},
        "buffers": {"a_ptr": {"shape": ["M", "K"], "dtype": "bfloat16"},
                    "b_ptr": {"shape": ["K", "N"], "dtype": "bfloat16"},
                    "bias_ptr": {"shape": ["N"], "dtype": "bfloat16"},
                    "c_ptr": {"shape": [1, "M", "N"], "dtype": "bfloat16", "output": True}}})


def _attention(target: str) -> Entry:
    """kernels/triton/attention.py's _attn_fwd on its pointer path (USE_TMA False: the descriptor arguments
    are the tensors themselves), no bias or mask (their strides 0), q and o (B, SQ, H, D), k and v
    (B, SK, HK, D) with H a multiple of HK, lse (B, H, SQ); grid (cdiv(SQ, BLOCK_M), B * H). sm_scale only
    scales values, so it is compiled as a constant (1/sqrt(64))."""
    q = {"shape": ["B", "SQ", "H", 64], "dtype": "bfloat16"}
    kv = {"shape": ["B", "SK", "HK", 64], "dtype": "bfloat16"}
    zero = {name: 0 for name in ("stride_bb", "stride_bh", "stride_bm", "stride_bn", "stride_mb", "stride_mh",
                                 "stride_mm", "stride_mn")}
    return Entry("attention.forward.pointer", "ceiling.triton.attention", "_attn_fwd", family="attention",
                 section="fwd", point_keys=("block_m", "block_n"),
                 body={
        "targets": [target],
        "grid": ["cdiv(SQ, BLOCK_M)", "B * H"],
        "sizes": {"B": [1, 64], "H": [1, 128], "HK": [1, 128], "SQ": [1, 2**17], "SK": [1, 2**17]},
        "scalars": {"stride_qb": "SQ * H * 64", "stride_qs": "H * 64", "stride_qh": 64,
                    "stride_kb": "SK * HK * 64", "stride_ks": "HK * 64", "stride_kh": 64,
                    "stride_vb": "SK * HK * 64", "stride_vs": "HK * 64", "stride_vh": 64,
                    "stride_ob": "SQ * H * 64", "stride_os": "H * 64", "stride_oh": 64, **zero,
                    "n_heads": "H", "group": "H // HK", "seqlen_q": "SQ", "seqlen_k": "SK"},
        "constexprs": {"sm_scale": [0.125], "HEAD_DIM": [64], "HEAD_DIM_PAD": [64], "BLOCK_M": [128],
                       "BLOCK_N": [64], "CAUSAL": [False, True], "HAS_BIAS": [False], "HAS_MASK": [False],
                       "USE_TMA": [False], "PRE_LOAD_V": [False], "WARP_SPECIALIZE": [False], "EXP2_SPLIT": [False]},
        "assume": {"conditions": ["HK <= H", "H % HK == 0"]},
        "buffers": {"Q": q, "K": kv, "V": kv, "Bias": q, "Mask": q, "O": {**q, "output": True},
                    "LSE": {"shape": ["B", "H", "SQ"], "dtype": "float32", "output": True},
                    "desc_q": q, "desc_k": kv, "desc_v": kv}})


def _attention_bwd(target: str) -> tuple:
    """The backward's kernels of kernels/triton/attention.py as ``backward`` launches them on the pointer path
    with no bias or mask (those arguments are q itself, their strides 0), at the sm_90a table's tiles for
    head dim 64: the preprocess (delta (B, H, SQ)); dK and dV per key block, written as k and v
    (B, SK, HK, 64) when every query head has its own key head, else one float32 slice per query head
    (B, SK, H, 64) that the host sums over each group; dQ per query block. The scale only scales values:
    compiled as 1/sqrt(64)."""
    q = {"shape": ["B", "SQ", "H", 64], "dtype": "bfloat16"}
    kv = {"shape": ["B", "SK", "HK", 64], "dtype": "bfloat16"}
    rows = {"shape": ["B", "H", "SQ"], "dtype": "float32"}
    bshd = lambda name, s, h: {f"stride_{name}b": f"{s} * {h} * 64", f"stride_{name}s": f"{h} * 64",  # noqa: E731
                               f"stride_{name}h": 64}
    zero = {f"stride_{x}": 0 for x in ("bb", "bh", "bm", "bn", "mb", "mh", "mm", "mn")}
    sizes = {"B": [1, 64], "H": [1, 128], "HK": [1, 128], "SQ": [1, 2**17], "SK": [1, 2**17]}
    lengths = {"n_heads": "H", "group": "H // HK", "seqlen_q": "SQ", "seqlen_k": "SK"}
    flags = {"sm_scale": [0.125], "HEAD_DIM": [64], "HEAD_DIM_PAD": [64], "CAUSAL": [False, True],
             "HAS_BIAS": [False], "HAS_MASK": [False], "USE_TMA": [False]}
    inputs = {"Q": q, "K": kv, "V": kv, "DO": q, "LSE": rows, "Delta": rows, "Bias": q, "Mask": q,
              "desc_q": q, "desc_k": kv, "desc_v": kv, "desc_do": q}
    module = "ceiling.triton.attention"
    # the preprocess's block is the launcher's own (64 queries), run for every backward config
    pre = Entry("attention.bwd_preprocess", module, "_attn_bwd_preprocess", family="attention", section="dkdv",
                body={
        "targets": [target], "grid": ["cdiv(SQ, BLOCK_M)", "B * n_heads"], "sizes": {"B": [1, 64], "SQ": [1, 2**17]},
        "scalars": {**bshd("o", "SQ", "n_heads"), **bshd("do", "SQ", "n_heads"), "n_heads": [1, 128],
                    "seqlen_q": "SQ"},
        "constexprs": {"HEAD_DIM": [64], "HEAD_DIM_PAD": [64], "BLOCK_M": [64]},
        "buffers": {"O": {"shape": ["B", "SQ", "n_heads", 64], "dtype": "bfloat16"},
                    "DO": {"shape": ["B", "SQ", "n_heads", 64], "dtype": "bfloat16"},
                    "Delta": {"shape": ["B", "n_heads", "SQ"], "dtype": "float32", "output": True}}})
    dkdv = []
    for gqa in (False, True):
        heads, dtype = ("H", "float32") if gqa else ("HK", "bfloat16")
        grad = {"shape": ["B", "SK", heads, 64], "dtype": dtype, "output": True}
        dkdv.append(Entry("attention.bwd_dkdv" + (".gqa" if gqa else ""), module, "_attn_bwd_dkdv",
                          family="attention", section="dkdv", point_keys=("block_m", "block_n"), body={
            "targets": [target], "grid": ["cdiv(SK, BLOCK_N)", "B * H"], "sizes": sizes,
            "scalars": {**bshd("q", "SQ", "H"), **bshd("k", "SK", "HK"), **bshd("v", "SK", "HK"),
                        **bshd("do", "SQ", "H"), **bshd("dk", "SK", heads), **bshd("dv", "SK", heads), **zero,
                        **lengths, "stride_dq32b": 0, "stride_dq32s": 0, "stride_dq32h": 0},
            "constexprs": {**flags, "BLOCK_M": [64], "BLOCK_N": [128], "DQ_ATOMIC": [False], "DQ32": [None]},
            "assume": {"conditions": ["HK < H" if gqa else "HK == H", "H % HK == 0"]},
            "buffers": {**inputs, "DK": grad, "DV": grad}}))
    dq = Entry("attention.bwd_dq", module, "_attn_bwd_dq", family="attention", section="dq",
               point_keys=("block_m", "block_n"), body={
        "targets": [target], "grid": ["cdiv(SQ, BLOCK_M)", "B * H"], "sizes": sizes,
        "scalars": {**bshd("q", "SQ", "H"), **bshd("k", "SK", "HK"), **bshd("v", "SK", "HK"), **bshd("do", "SQ", "H"),
                    **bshd("dq", "SQ", "H"), **zero, **{f"stride_db{x}": 0 for x in "bhmn"}, **lengths},
        "constexprs": {**flags, "BLOCK_M": [128], "BLOCK_N": [64], "DBIAS": [0]},
        "assume": {"conditions": ["HK <= H", "H % HK == 0"]},
        "buffers": {**inputs, "DQ": {**q, "output": True}, "DBias": q}})
    return pre, *dkdv, dq


def _triangle_attention(target: str) -> Entry:
    """kernels/triton/triangle_attention.py's fwd_kernel as ``forward`` launches it with a key mask: q, k,
    v and out (BATCH, N, H, N, D) contiguous, the bias (BATCH, 1, H, N, N), the key-mask rows
    (BATCH * N, N padded to 256) and lse (BATCH, N, H, N); grid (cdiv(N, BLOCK_M), BATCH * N * H), one pair
    row per program (ROWS = 1). qk_scale only scales values: compiled as the default scale's (D = 64)."""
    from ceiling.triton.triangle_attention import KEY_PAD, LOG2E

    pair = {"shape": ["BATCH", "N", "H", "N", "D"], "dtype": "bfloat16"}
    # race: the pair row is rebuilt from three divisions of the program id; equal rows for distinct programs
    # take the solver 10 to 20 s to refute
    return Entry("triangle_attention.forward", "ceiling.triton.triangle_attention", "fwd_kernel", slow=("race",),
                 family="triangle_attention", section="fwd", point_keys=("BLOCK_M", "BLOCK_N", "EXP2_SPLIT"),
                 body={
        "targets": [target],
        "grid": ["cdiv(N, BLOCK_M)", "BATCH * N * H"],
        "sizes": {"BATCH": [1, 4]},
        "scalars": {"N": [1, 1024], "H": [1, 8], "D": [33, 64], "kb_row_stride": f"cdiv(N, {KEY_PAD}) * {KEY_PAD}"},
        "constexprs": {"qk_scale": [0.125 * LOG2E], "PRECISION": ["tf32"], "BLOCK_M": [128], "BLOCK_N": [64],
                       "HEAD_DIM": [64], "EXP2_SPLIT": [False], "ROWS": [1]},
        "buffers": {"Q": pair, "K": pair, "V": pair, "Bias": {"shape": ["BATCH", 1, "H", "N", "N"], "dtype": "bfloat16"},
                    "KeyBias": {"shape": ["BATCH * N", "kb_row_stride"], "dtype": "float32"},
                    "O": {**pair, "output": True},
                    "LSE": {"shape": ["BATCH", "N", "H", "N"], "dtype": "float32", "output": True}}})


def _triangle_attention_bwd(target: str) -> tuple:
    """The backward's kernels as ``backward`` launches them with a key mask, at the sm_90a table's tiles for
    head dims in (32, 64]: the preprocess (delta = rowsum(o * do), (BATCH, N, H, N)); dK and dV per key block,
    with ``DQ_ATOMIC`` also adding dQ into a zeroed float32 buffer with atomics; dQ per query block; and
    dbias per (query, key) tile summed over the pair rows, ``ROW_SPLIT`` runs of rows each into its own
    slice of a (ROW_SPLIT, BATCH, 1, H, N, N) buffer. The scales only scale values: compiled as the default
    scale's (D = 64)."""
    from ceiling.triton.triangle_attention import KEY_PAD, LOG2E

    pair = {"shape": ["BATCH", "N", "H", "N", "D"], "dtype": "bfloat16"}
    rows = {"shape": ["BATCH", "N", "H", "N"], "dtype": "float32"}
    base = {"targets": [target], "sizes": {"BATCH": [1, 4]},
            "scalars": {"N": [1, 1024], "H": [1, 8], "D": [33, 64],
                        "kb_row_stride": f"cdiv(N, {KEY_PAD}) * {KEY_PAD}"}}
    inputs = {"Q": pair, "K": pair, "V": pair, "DO": pair, "LSE": rows, "Delta": rows,
              "Bias": {"shape": ["BATCH", 1, "H", "N", "N"], "dtype": "bfloat16"},
              "KeyBias": {"shape": ["BATCH * N", "kb_row_stride"], "dtype": "float32"}}
    scales = {"qk_scale": [0.125 * LOG2E], "PRECISION": ["tf32"], "HEAD_DIM": [64]}
    module = "ceiling.triton.triangle_attention"
    pre = Entry("triangle_attention.bwd_preprocess", module, "bwd_preprocess_kernel", family="triangle_attention",
                section="bwd_dq", point_keys=("BLOCK_M",), body={
        "targets": [target], "sizes": {"BATCH": [1, 4], "H": [1, 8]}, "grid": ["cdiv(N, BLOCK_M)", "BATCH * N * H"],
        "scalars": {"N": [1, 1024], "D": [33, 64]},
        "constexprs": {"BLOCK_M": [64], "HEAD_DIM": [64]},
        "buffers": {"O": pair, "DO": pair, "Delta": {**rows, "output": True}}})
    dkdv = Entry("triangle_attention.bwd_dkdv", module, "bwd_dkdv_kernel", family="triangle_attention",
                 section="bwd_dkdv", point_keys=("BLOCK_M", "BLOCK_N"), body={
        **base, "grid": ["cdiv(N, BLOCK_N)", "BATCH * N * H"],
        "constexprs": {**scales, "scale": [0.125], "BLOCK_M": [32], "BLOCK_N": [64], "DQ_ATOMIC": [False],
                       "DQ32": [None]},
        "buffers": {**inputs, "DK": {**pair, "output": True}, "DV": {**pair, "output": True}}})
    # coverage: each key block's program adds into every query block of dQ, starting at its own block and
    # wrapping around (a rotation modulo the block count), which only the quantified query sees, and it
    # times out
    dkdv_atomic = Entry("triangle_attention.bwd_dkdv.dq_atomic", module, "bwd_dkdv_kernel", unknown=("coverage",),
                        family="triangle_attention", section="bwd_dkdv", applies="DQ_ATOMIC",
                        point_keys=("BLOCK_M", "BLOCK_N"),
                        body={
        **base, "grid": ["cdiv(N, BLOCK_N)", "BATCH * N * H"],
        "constexprs": {**scales, "scale": [0.125], "BLOCK_M": [32], "BLOCK_N": [64], "DQ_ATOMIC": [True]},
        "buffers": {**inputs, "DK": {**pair, "output": True}, "DV": {**pair, "output": True},
                    "DQ32": {**pair, "dtype": "float32", "output": True}}})
    dq = Entry("triangle_attention.bwd_dq", module, "bwd_dq_kernel", family="triangle_attention", section="bwd_dq",
               point_keys=("BLOCK_M", "BLOCK_N"), body={
        **base, "grid": ["cdiv(N, BLOCK_M)", "BATCH * N * H"],
        "constexprs": {**scales, "scale": [0.125], "BLOCK_M": [64], "BLOCK_N": [32]},
        "buffers": {**inputs, "DQ": {**pair, "output": True}}})
    dbias = Entry("triangle_attention.bwd_dbias", module, "bwd_dbias_kernel", family="triangle_attention",
                  section="bwd_dbias", point_keys=("BLOCK_M", "BLOCK_N", "ROW_SPLIT"), body={
        **base, "grid": ["cdiv(N, BLOCK_M)", "cdiv(N, BLOCK_N)", "BATCH * H * ROW_SPLIT"],
        "constexprs": {**scales, "BLOCK_M": [32], "BLOCK_N": [32], "ROW_SPLIT": [1, 4]},
        "buffers": {**inputs, "DBias": {"shape": ["ROW_SPLIT", "BATCH", 1, "H", "N", "N"], "dtype": "float32",
                                        "output": True}}})
    return pre, dkdv, dkdv_atomic, dq, dbias


ENTRIES = (
    # kernels/nvidia/gemm.py: the split-K partial planes (SPLIT_K * M rows of a row-padded fp32
    # workspace) summed into C, grid (cdiv(m, 32), cdiv(n, 128)).
    Entry("gemm.splitk_reduce", "ceiling.nvidia.gemm_kernels", "splitk_reduce_kernel", family="gemm",
          applies="SPLIT_K > 1", point_keys=("SPLIT_K",), body={
        "targets": ["sm_90a"],
        "grid": ["cdiv(M, BLOCK_M)", "cdiv(N, BLOCK_N)"],
        "scalars": {"M": _SIZE, "N": _SIZE, "PLANE_ROWS": "M", "stride_ws": [1, 2**17 + 4],
                    "stride_cm": [1, 2**17 + 8]},
        "constexprs": {"SPLIT_K": _SPLIT_K, "HAS_BIAS": [True], "ACTIVATION": ["gelu"], "BLOCK_M": [32],
                       "BLOCK_N": [128]},
        "assume": {"conditions": ["stride_ws >= N", "stride_cm >= N"]},
        "buffers": {"ws_ptr": {"shape": ["SPLIT_K * M", "N"], "strides": ["stride_ws", 1], "dtype": "float32"},
                    "c_ptr": {"shape": ["M", "N"], "strides": ["stride_cm", 1], "dtype": "bfloat16", "output": True},
                    "bias_ptr": {"shape": ["N"], "dtype": "bfloat16"}},
    }),
    # kernels/amd/gemm.py: SPLIT_K fp32 planes of (batch, M, N) summed in a fixed order, grid
    # (cdiv(m, 64), cdiv(n, 64), batch).
    Entry("gemm.splitk_reduce", "ceiling.amd.gemm", "splitk_reduce_kernel", family="gemm",
          applies="SPLIT_K > 1", point_keys=("SPLIT_K",), body={
        "targets": ["gfx942"],
        "grid": ["cdiv(M, BLOCK_M)", "cdiv(N, BLOCK_N)", "B"],
        "sizes": {"B": [1, 64]},
        "scalars": {"M": _SIZE, "N": _SIZE, "stride_ws": "B * M * N", "stride_wb": "M * N",
                    "stride_wm": "N", "stride_cb": "M * N", "stride_cm": "N", "stride_cn": 1},
        "constexprs": {"SPLIT_K": _SPLIT_K, "BLOCK_M": [64], "BLOCK_N": [64], "HAS_BIAS": [True], "ACTIVATION": [2]},
        "buffers": {"ws_ptr": {"shape": ["SPLIT_K", "B", "M", "N"], "dtype": "float32"},
                    "c_ptr": {"shape": ["B", "M", "N"], "strides": ["stride_cb", "stride_cm", "stride_cn"],
                              "dtype": "bfloat16", "output": True},
                    "bias_ptr": {"shape": ["N"], "dtype": "bfloat16"}},
    }),
    # The FP8 quantizer (kernels/triton, both GPU targets): per 1x128 group, transposed, per 128x128 tile.
    *(_fp8_groups(t, tile, tr) for t in ("sm_90a", "gfx942") for tile, tr in ((False, False), (False, True),
                                                                              (True, False))),
    *(_fp8_rows(t) for t in ("sm_90a", "gfx942")),
    *(e for t in ("sm_90a", "gfx942") for e in _fp8_tensor(t)),
    *(e for t in ("sm_90a", "gfx942") for e in _trimul(t)),
    *(e for t in ("sm_90a", "gfx942") for e in _trimul_bwd(t)),
    _gemm_pointer(False),
    _amd_gemm(),
    *(_attention(t) for t in ("sm_90a", "gfx942")),
    *(e for t in ("sm_90a", "gfx942") for e in _attention_bwd(t)),
    *(_triangle_attention(t) for t in ("sm_90a", "gfx942")),
    *(e for t in ("sm_90a", "gfx942") for e in _triangle_attention_bwd(t)),
)


# Milliseconds per solver query for the properties an entry names as unknown, and for those it names as slow
# (their own budgets, not --timeout's).
UNKNOWN_TIMEOUT_MS = 2000
SLOW_TIMEOUT_MS = 60000


def cache_dir():
    import os
    from pathlib import Path

    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(root) / "ceiling" / "verify"


def digest(entry: Entry, properties, point=None) -> str:
    """What a cached answer depends on: the kernel's source with every function it calls (Triton's own
    cache key), the contract, the properties (and which of them the entry names as unknown), and the
    Triton and z3 versions."""
    import hashlib
    import importlib
    import json

    import triton
    import z3

    fn = getattr(importlib.import_module(entry.module), entry.kernel)
    key = json.dumps([entry.name, entry.module, entry.kernel, fn.cache_key, entry.body, list(properties or []),
                      list(entry.unknown), list(entry.slow), UNKNOWN_TIMEOUT_MS, SLOW_TIMEOUT_MS,
                      entry.constexprs(point) or None,
                      triton.__version__, z3.get_version_string()], sort_keys=True, default=str)
    return hashlib.sha256(key.encode()).hexdigest()


def results(entry: Entry, properties=None, point=None, timeout_ms=None, use_cache=True):
    """(results, cached) of one entry, for ``point``'s constexprs if given; cached by digest."""
    import json

    from ceiling.verify import check
    from ceiling.verify.result import Result

    from ceiling.verify import properties as props

    path = cache_dir() / f"{digest(entry, properties, point)}.json"
    if use_cache and path.is_file():
        return [Result.from_dict(d) for d in json.loads(path.read_text())], True
    contract = entry.contract(point)
    timeout_ms = timeout_ms or props.DEFAULT_TIMEOUT_MS
    wanted = list(properties or [p for p in props.PROPERTIES if p != "accumulate" or contract.contraction])
    # What the entry names as beyond the verifier gets a short budget: it answers unknown either way (a
    # counterexample found in time still stands), and the sweep stays minutes long.
    hard = [p for p in wanted if p in entry.unknown]
    slow = [p for p in wanted if p in entry.slow and p not in hard]
    easy = [p for p in wanted if p not in hard and p not in slow]
    out = check.verify(contract, easy, timeout_ms=timeout_ms) if easy else []
    out += check.verify(contract, slow, timeout_ms=max(timeout_ms, SLOW_TIMEOUT_MS)) if slow else []
    out += check.verify(contract, hard, timeout_ms=min(timeout_ms, UNKNOWN_TIMEOUT_MS)) if hard else []
    combos = list(contract.combinations())
    out.sort(key=lambda r: (contract.targets.index(r.kernel.rsplit("@", 1)[1]), combos.index(r.constexprs),
                            wanted.index(r.property)))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps([r.as_dict() for r in out]))
    return out, False


def verify_all(properties=None, timeout_ms=None, use_cache=True, entries=None):
    """Every entry's (or ``entries``') results, from the cache when its digest is there; yields
    (entry, results, cached)."""
    for entry in ENTRIES if entries is None else entries:
        yield (entry, *results(entry, properties, None, timeout_ms, use_cache))


def decided() -> tuple:
    """What ``ceiling run`` proves for its report: per kernel function and target, the first entry the
    solver decides in full (no property known to be unknown); ``ceiling verify --all`` runs every entry."""
    seen, out = set(), []
    for e in ENTRIES:
        if not e.unknown and (e.module, e.kernel, e.target) not in seen:
            seen.add((e.module, e.kernel, e.target))
            out.append(e)
    return tuple(out)


def check_point(family: str, target: str, point: dict) -> list:
    """(entry, its results) for every kernel ``point`` (a config of ``family`` on ``target``, flat or
    sectioned) launches that has a contract, at the point's constexprs."""
    return [(e, results(e, None, point)[0]) for e in ENTRIES
            if e.family == family and e.target == target and e.launched_by(point)]


def failures(family: str, target: str, point: dict) -> list:
    """The results that do not hold for ``point`` (empty when every proof holds): a counterexample, or an
    unknown where the entry expects a proof (a property it names as unknown is a known limit, which the
    certificate records as not proved)."""
    return [r for e, rs in check_point(family, target, point) for r in rs
            if not r.proved and not (r.status.value == "unknown" and r.property in e.unknown)]


def certificate(family: str, target: str, prove: bool = True) -> dict:
    """What the proofs of a family's kernels on a target cover: the properties, each kernel's domain and
    digest, the constexpr points proved and those not, and the Triton and z3 versions. With ``prove``
    False only the proofs already in the cache are read; a kernel without one is listed as not verified
    (``ceiling run``'s templates: ``ceiling export-templates`` and ``ceiling verify --all`` prove them)."""
    import json

    import triton
    import z3

    from ceiling.verify.result import Result

    kernels = []
    for entry in ENTRIES:
        if entry.family != family or entry.target != target:
            continue
        cached = cache_dir() / f"{digest(entry, None)}.json"
        if not prove and not cached.is_file():
            kernels.append({"name": entry.name, "kernel": f"{entry.module}.{entry.kernel}",
                            "digest": digest(entry, None), "not_verified": "no proof in this run's cache"})
            continue
        rs = [Result.from_dict(d) for d in json.loads(cached.read_text())] if not prove else results(entry)[0]
        combos: dict = {}
        for r in rs:
            combos.setdefault(tuple(sorted(r.constexprs.items())), []).append(r)
        c = entry.contract()
        kernels.append({
            "name": entry.name, "kernel": f"{entry.module}.{entry.kernel}", "launched_when": entry.applies or "always",
            "digest": digest(entry, None), "properties": sorted({r.property for r in rs}),
            "domain": {k: (f"[{s.lo}, {s.hi}]" if s.expr is None else s.expr.text) for k, s in c.domain_scalars().items()},
            "assume": [a.text for a in c.assume],
            "points_proved": [dict(k) for k, v in combos.items() if all(r.proved for r in v)],
            "points_not_proved": [{"constexprs": dict(k), "results": [r.as_dict() for r in v if not r.proved]}
                                  for k, v in combos.items() if not all(r.proved for r in v)]})
    return {"family": family, "target": target, "level": "TTIR", "kernels": kernels,
            "triton": triton.__version__, "z3": z3.get_version_string()}
