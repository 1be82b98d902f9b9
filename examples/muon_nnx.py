"""Muon on a `flax.nnx` model, through `nnx.Optimizer`.

    python examples/muon_nnx.py            # 18 s of CPU time

The model has an `nnx.Einsum` projection whose kernel is `(D, H, Dh)`: which of its axes make
the matrix only its author knows, so `optim.muon` asks (one line, naming the leaf) until told
with `matrix_axes` — here one `(D, Dh)` matrix per head. `nnx.Linear` kernels `fc1`, `fc2` are
hidden matrices (Muon), the `nnx.Embed` table and `lm_head` go to AdamW. It trains on a
next-token rule and prints the loss and the singular values of one head's update.
"""

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

import optim

V, D, H, F, T, B = 32, 32, 4, 64, 16, 16


class TinyLM(nnx.Module):
  def __init__(self, rngs: nnx.Rngs):
    self.embed = nnx.Embed(V, D, rngs=rngs)
    self.norm = nnx.LayerNorm(D, rngs=rngs)
    self.heads = nnx.Einsum("btd,dhk->bthk", (D, H, D // H), rngs=rngs)
    self.fc1 = nnx.Linear(D, F, rngs=rngs)
    self.fc2 = nnx.Linear(F, D, rngs=rngs)
    self.lm_head = nnx.Linear(D, V, rngs=rngs)

  def __call__(self, tokens):
    x = self.embed(tokens)
    h = self.heads(self.norm(x))
    x = x + h.reshape(h.shape[:-2] + (D,))
    x = x + self.fc2(nnx.gelu(self.fc1(x)))
    return self.lm_head(x)


def batch(step):
  """Sequences whose next token is `(3 * token + 1) mod V`."""
  first = jax.random.randint(jax.random.key(step), (B, 1), 0, V)
  steps = jnp.arange(T + 1)[None, :]
  return (first * 3**steps + (3**steps - 1) // 2) % V


def loss_fn(model, tokens):
  logits = model(tokens[:, :-1])
  return optax.softmax_cross_entropy_with_integer_labels(logits, tokens[:, 1:]).mean()


def main():
  model = TinyLM(nnx.Rngs(0))
  try:
    nnx.Optimizer(model, optim.muon(0.02), wrt=nnx.Param)
  except ValueError as e:
    print("without matrix_axes:", e)

  per_head = {"heads/kernel": optim.MatrixAxes(reduction=0, output=2)}  # H matrices (D, Dh)
  tx = optim.muon(0.02, adam_learning_rate=3e-3, matrix_axes=per_head)
  opt = nnx.Optimizer(model, tx, wrt=nnx.Param)

  @nnx.jit
  def step(model, opt, tokens):
    before = model.heads.kernel[...]
    loss, grads = nnx.value_and_grad(loss_fn)(model, tokens)
    opt.update(model, grads)
    return loss, model.heads.kernel[...] - before

  for i in range(100):
    loss, delta = step(model, opt, batch(i))
    if i in (0, 99):
      s = np.linalg.svd(np.asarray(delta[:, 0, :], np.float64), compute_uv=False) / 0.02
      print(f"step {i:3d}  loss {float(loss):.3f}  head 0 update / lr, singular values "
            f"{np.round(s, 2)}")
  assert float(loss) < 0.5 * float(jnp.log(V)), float(loss)


if __name__ == "__main__":
  main()
