"""The state-space (Mamba) layer of a hybrid model, and the work of the Mamba-2 SSD kernels
(:func:`ssd_traffic`: backward FLOPs and HBM traffic per token, tallied from mamba_ssm's kernels).
"""

from __future__ import annotations

from dataclasses import dataclass

from paraplan.graph.decoder_layers import norm_params_of
from paraplan.graph.layer import Gemm, Layer, LayerKind
from paraplan.graph.spec import ModelSpec

__all__ = ["SsdTraffic", "ssd_traffic", "mamba_layer"]


@dataclass(frozen=True, slots=True)
class SsdTraffic:
    """Work of the Mamba-2 SSD kernels per token (all heads of the layer). Units: FLOPs, bytes."""

    backward_flops: int
    forward_bytes: float
    backward_bytes: float


def ssd_traffic(heads: int, head_dim: int, state: int, groups: int, chunk: int) -> SsdTraffic:
    """Backward FLOPs and HBM traffic of the chunked SSD scan, tallied kernel by kernel from
    mamba_ssm 2.3 ops/triton/ssd_combined.py (_mamba_chunk_scan_combined_fwd / _bwd, with the
    gate z inside the scan as megatron-core's mamba_split_conv1d_scan_combined passes it).

    Per token, with H heads of width P (d = H P), state N, G groups and chunk Q: chunk states
    S = H P N / Q elements, kept in fp32 (4 B); the C.B^T blocks G Q elements in fp32; x, z,
    out, B, C and their gradients in bf16 (2 B).
    Forward (chunk_state, state_passing, bmm_chunk, chunk_scan): 12 S + 8 G Q + 8 G N + 10 d
    bytes. Backward (recomputed chunk_state, state_passing and bmm_chunk, then dz, dstates,
    state_passing_bwd, dx, dB, the states' bf16 copy, dC, dCB, two bmm_chunk_bwd, ddA):
    44 S + 24 G Q + 30 G N + 34 d bytes, and H (6 Q P + 10 N P) + 6 Q N G FLOPs (the forward:
    H (2 Q P + 4 N P) + 2 Q N G, see ``mamba_layer``).
    """
    d = heads * head_dim
    s = d * state / chunk
    gq, gn = groups * chunk, groups * state
    return SsdTraffic(
        backward_flops=heads * (6 * chunk * head_dim + 10 * state * head_dim) + 6 * chunk * state * groups,
        forward_bytes=12 * s + 8 * gq + 8 * gn + 10 * d,
        backward_bytes=44 * s + 24 * gq + 30 * gn + 34 * d,
    )


def mamba_layer(spec: ModelSpec, i: int) -> Layer:
    """A state-space mixer with its pre-norm (one hybrid-pattern ``M`` layer).

    Mamba-2 (megatron-core 0.16.1 ssm/mamba_mixer.py; Dao & Gu 2024, arXiv:2405.21060): in_proj
    h -> z, x (d_inner each), B, C (groups x state each), dt (heads), column-parallel; depthwise
    causal conv (conv_kernel taps, bias) over x, B, C; the SSD scan; gated RMSNorm over d_inner;
    out_proj d_inner -> h, row-parallel; dt_bias, A_log and D per head. TP shards heads and groups
    (Megatron: num_groups % tp == 0), so the mixer has one TP all-reduce pair, like attention.

    SSD scan FLOPs per token (arXiv:2405.21060 Sec. 6, chunk length Q): C.B^T within the chunk
    2*Q*N per group, its product with x 2*Q*d_inner, chunk states B^T.x 2*N*d_inner, the states'
    read-out C.h 2*N*d_inner (the kernels compute whole Q x Q blocks: no causal halving); the conv
    2*conv_kernel*conv_dim.

    Mamba-1 (Gu & Dao 2023, arXiv:2312.00752 Alg. 2; transformers modeling_jamba.py
    JambaMambaMixer): in_proj h -> 2*d_inner, conv over d_inner, x_proj d_inner -> dt_rank + 2N,
    dt_proj dt_rank -> d_inner (bias), A (d_inner x N), D, Jamba's dt/B/C RMSNorms, out_proj. The
    selective scan does ~9 FLOPs per channel per state element (discretise exp(dt*A), dt*B*x,
    h = dA*h + dBx, y = C.h). Costed with Mamba-2's TP scheme (heads = channels): x_proj's small
    all-reduce (dt_rank + 2N per token) is not counted.

    The SSD kernels' backward FLOPs and HBM traffic: ``ssd_traffic``. Mamba-1's selective scan
    is one fused kernel holding its state on chip (no state traffic; backward 2x its FLOPs).

    Stored for backward per token: in_proj output, conv output, scan output and the gated-norm
    output (out_proj input) TP-sharded; the block input and normed input per sequence shard.
    ``state_elems_per_seq``: conv state (conv_kernel x conv_dim) + SSM state (d_inner x N).
    """
    h, m = spec.hidden, spec.mamba
    n, k = m.state_dim, m.conv_kernel
    gemms: tuple[Gemm, ...]
    if m.version == 2:
        d = m.num_heads * m.head_dim
        bc = 2 * m.num_groups * n
        conv_dim = d + bc
        gemms = (
            Gemm(name="in_proj", in_dim=h, out_dim=2 * d + bc + m.num_heads, tp_split="out"),
            Gemm(name="out_proj", in_dim=d, out_dim=h, tp_split="in"),
        )
        extra_params = conv_dim * k + conv_dim + 3 * m.num_heads + d  # conv + bias, dt/A/D, norm
        q = m.chunk_size
        scan = 2 * q * m.num_groups * n + 2 * q * d + 4 * n * d + 2 * k * conv_dim
        ssd = ssd_traffic(m.num_heads, m.head_dim, n, m.num_groups, q)
        # the conv's backward: recomputed forward + input and weight gradients
        scan_backward = ssd.backward_flops + 3 * 2 * k * conv_dim
        scan_bytes, scan_backward_bytes = ssd.forward_bytes, ssd.backward_bytes
        act_tp = (2 * d + bc + m.num_heads) + conv_dim + d + d
        # megatron-core _ssm_training copies the in_proj output to batch-major and the scan
        # output back (rearrange(...).contiguous()): read + write of each
        copies = 2 * (2 * d + bc + m.num_heads) + 2 * d
        chunk = q
    else:
        d = m.expand * h
        r = m.dt_rank or -(-h // 16)
        conv_dim = d
        gemms = (
            Gemm(name="in_proj", in_dim=h, out_dim=2 * d, tp_split="out"),
            Gemm(name="x_proj", in_dim=d, out_dim=r + 2 * n, tp_split="in"),
            Gemm(name="dt_proj", in_dim=r, out_dim=d, tp_split="out"),
            Gemm(name="out_proj", in_dim=d, out_dim=h, tp_split="in"),
        )
        # conv + bias, dt_proj bias, A, D, dt/B/C norms
        extra_params = d * k + d + d + d * n + d + (r + 2 * n)
        scan = 9 * d * n + 2 * k * d
        act_tp = 2 * d + d + (r + 2 * n) + d + d + d
        scan_backward, scan_bytes, scan_backward_bytes, copies = 0, 0.0, 0.0, 0
        chunk = 0
    return Layer(
        name=f"mamba_{i}",
        kind=LayerKind.MAMBA,
        block=i,
        params=sum(g.params for g in gemms) + extra_params + norm_params_of(spec),
        gemms=gemms,
        act_tp_elems=act_tp,
        act_sp_elems=2 * h,
        act_tp_gemm_elems=d,
        act_sp_gemm_elems=h,
        # norm, residual, conv, gate + norm, layout copies
        mem_bound_elems=2 * h + 3 * h + 2 * conv_dim + 4 * d + copies,
        shardable=("tp", "sp"),
        scan_flops_per_token=scan,
        scan_chunk=chunk,
        scan_backward_flops_per_token=scan_backward,
        scan_bytes_per_token=scan_bytes,
        scan_backward_bytes_per_token=scan_backward_bytes,
        state_elems_per_seq=k * conv_dim + d * n,
    )
