"""XLA's own memory plan for a MaxText-shaped decoder (run with MaxText's Python 3.12 and jax).

    python3.12 xla_remat_memory_check.py

Compiles (never runs) the gradient of a decoder that has MaxText's shape - a ``lax.scan`` over
layers, each under ``jax.checkpoint`` with MaxText 0.2.5's policy (``full``: None; ``minimal``:
``save_only_these_names`` over query/key/value_proj, out_proj, mlpwi, mlpwo, layers/nnx_decoders.py),
bf16 activations, fp32 parameters cast per layer, an RMSNorm - attention - ReLU MLP block and
MaxText's custom-vjp cross entropy on fp32 logits with one-hot targets (utils/max_utils.py) - on
the CPU backend and reads ``compiled.memory_analysis().temp_size_in_bytes``. Prints one JSON
object with the shapes and, from temp bytes at two depths and two vocabularies: the bytes each
extra layer keeps (slope), the transient at a small and a larger vocabulary (intercept), and the
loss phase's bytes per logit element. Imports nothing of paraplan (another interpreter).
"""

from __future__ import annotations

import json
import os

B, S, H, NH, HD, F = 4, 256, 1024, 2, 256, 4096
Q = NH * HD
NAMES = ("query_proj", "key_proj", "value_proj", "out_proj", "mlpwi", "mlpwo")


def main() -> int:
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import jax
    import jax.numpy as jnp
    from jax.ad_checkpoint import checkpoint_name

    bf, f32 = jnp.bfloat16, jnp.float32

    def rms(x):
        x32 = x.astype(f32)
        return (x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, -1, keepdims=True) + 1e-6)).astype(bf)

    def attention(q, k, v):  # s = 256 with 2 heads: the scores are ~1% of a layer's activations
        q, k, v = (t.reshape(B, S, NH, HD) for t in (q, k, v))
        s = jnp.einsum("bqhd,bkhd->bhqk", q, k).astype(f32) / HD**0.5
        s = jnp.where(jnp.tril(jnp.ones((S, S), bool)), s, -1e9)
        return jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(s, -1).astype(bf), v).reshape(B, S, Q)

    def layer(x, w):
        wq, wk, wv, wo, wi, wd = (a.astype(bf) for a in w)
        y = rms(x)
        q, k, v = (checkpoint_name(y @ a, n) for a, n in zip((wq, wk, wv), NAMES, strict=False))
        x = x + checkpoint_name(attention(q, k, v) @ wo, "out_proj")
        h = jax.nn.relu(checkpoint_name(rms(x) @ wi, "mlpwi"))
        return x + checkpoint_name(h @ wd, "mlpwo")

    @jax.custom_vjp
    def xent(logits, targets):
        return _xent_fwd(logits, targets)[0]

    def _xent_fwd(logits, targets):  # MaxText cross_entropy_with_logits, z_loss = 0
        shifted = logits - logits.max(-1, keepdims=True)
        e = jnp.exp(shifted)
        se = e.sum(-1, keepdims=True)
        return -jnp.sum(targets * (shifted - jnp.log(se)), -1), (logits, targets, e, se)

    def _xent_bwd(res, g):
        logits, targets, e, se = res
        return jnp.asarray(g[..., None] * (e / se - targets), logits.dtype), None

    xent.defvjp(_xent_fwd, _xent_bwd)

    def temp_bytes(policy, layers: int, vocab: int) -> int:
        body = jax.checkpoint(lambda x, w: (layer(x, w), None), policy=policy, prevent_cse=False)

        def loss(params, x, tgt, wout):
            y, _ = jax.lax.scan(body, x, params)
            logits = (rms(y) @ wout.astype(bf)).astype(f32)  # cast_logits_to_fp32
            return jnp.mean(xent(logits, jax.nn.one_hot(tgt, vocab)))

        shapes = [(layers, H, Q)] * 3 + [(layers, Q, H), (layers, H, F), (layers, F, H)]
        args = (
            tuple(jax.ShapeDtypeStruct(s, f32) for s in shapes),
            jax.ShapeDtypeStruct((B, S, H), bf),
            jax.ShapeDtypeStruct((B, S), jnp.int32),
            jax.ShapeDtypeStruct((H, vocab), f32),
        )
        compiled = jax.jit(jax.grad(loss, argnums=(0, 3))).lower(*args).compile()
        return compiled.memory_analysis().temp_size_in_bytes

    minimal = jax.checkpoint_policies.save_only_these_names(*NAMES)
    full2, full4 = temp_bytes(None, 2, 1024), temp_bytes(None, 4, 1024)
    min4, min8 = temp_bytes(minimal, 4, 1024), temp_bytes(minimal, 8, 1024)
    big, bigger = temp_bytes(None, 2, 32768), temp_bytes(None, 2, 65536)
    print(
        json.dumps(
            {
                "batch": B,
                "seq_len": S,
                "hidden": H,
                "heads": NH,
                "head_dim": HD,
                "ffn_hidden": F,
                "full_bytes_per_layer": (full4 - full2) / 2,
                "minimal_bytes_per_layer": (min8 - min4) / 4,
                "full_intercept_vocab_1024": full2 - (full4 - full2),
                "full_intercept_vocab_4096": temp_bytes(None, 2, 4096) - (full4 - full2),
                "loss_bytes_per_logit_element": (bigger - big) / (B * S * (65536 - 32768)),
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
