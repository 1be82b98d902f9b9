"""Other people's trees: a linen model, an nnx model and Hugging Face names.

`optim.muon` must orthogonalize exactly the hidden matrices of each (every hidden update's
singular values inside the Newton–Schulz band of the coefficients, while AdamW's spread at
least 5× on the same gradient), leave embeddings and output layers to AdamW, and raise one
line naming the leaves and the fix on a tree it cannot place.
(`optim/roles.py`: `optim.labels`, `optim.labels_by_shape`, `optim.MatrixAxes`.)

Compilation is what these tests cost: gradients and constant trees are made by numpy (a jax
array op by op compiles each primitive of each shape on its own), and every optimizer update
runs under `jit`.
"""

import functools

import flax.linen as nn
import jax
import numpy as np
import optax
import pytest
from flax import nnx

import optim

D, F, V, H = 32, 48, 40, 4
# Jordan's coefficients, written out (as `NS_COEFFS["standard"]`), 5 steps.
STANDARD = (3.4445, -4.7750, 2.0315)


def ns_singular_values(s, steps=5, coeffs=STANDARD):
  """The singular values of Newton–Schulz(G) in exact arithmetic, from those of G (float64),
  sorted in descending order (the polynomial is not monotone)."""
  a, b, c = coeffs
  x = np.asarray(s, np.float64) / np.sqrt(np.sum(np.asarray(s, np.float64) ** 2))
  for _ in range(steps):
    x = a * x + b * x**3 + c * x**5
  return np.sort(x)[::-1]


def band(lowest):
  """The range of the 5-step polynomial over normalized singular values in `[lowest, 1]`."""
  a, b, c = STANDARD
  x = np.linspace(lowest, 1.0, 20001)
  for _ in range(5):
    x = a * x + b * x**3 + c * x**5
  return x.min(), x.max()


SPECTRUM = np.geomspace(1.0, 0.3, 24)  # every hidden gradient's singular values (κ = 3.3)


def _matrix_grad(seed, m, n):
  """`U diag(SPECTRUM[:k]) Vᵀ` with random orthogonal factors, `k = min(m, n)` (numpy)."""
  k = min(m, n)
  rng = np.random.default_rng(seed)
  u = np.linalg.qr(rng.normal(size=(m, m)))[0][:, :k]
  v = np.linalg.qr(rng.normal(size=(n, n)))[0][:, :k]
  s = np.geomspace(1.0, 0.3, k)
  return (u * s @ v.T).astype(np.float32)


def _array(x):
  """A jax array of numpy's `x` (float32), without compiling anything (`jnp.asarray` would)."""
  return jax.device_put(np.asarray(x, np.float32))


def _grads(params, hidden_matrices):
  """Controlled-spectrum gradients on hidden leaves (`hidden_matrices(path, shape) -> (m, n,
  to_leaf)` or `None`), random normal elsewhere."""
  leaves, treedef = jax.tree_util.tree_flatten_with_path(params)
  out = []
  for i, (path, p) in enumerate(leaves):
    spec = hidden_matrices(optim.roles.path_str(path), p.shape)
    if spec is None:
      out.append(_array(np.random.default_rng(i).normal(size=p.shape)))
    else:
      m, n, to_leaf, count = spec
      mats = np.stack([_matrix_grad((i, j), m, n) for j in range(count)])
      out.append(_array(to_leaf(mats)))
  return jax.tree.unflatten(treedef, out)


def _spread(M):
  s = np.linalg.svd(np.asarray(M, np.float64), compute_uv=False)
  return s.max() / s.min(), s


def _check_muon(params, grads, hidden, as_matrices, tx=None):
  """One Muon step (lr 1, no shape scaling) vs AdamW on the same gradient.

  Every leaf in `hidden` is orthogonalized: singular values of each of its matrices
  (`as_matrices(path, update) -> (k, m, n)`) inside the band and equal to Newton–Schulz's in
  exact arithmetic; AdamW's spread ≥ 5× there (for blocks no thinner than 2:3). Every other
  leaf gets AdamW's update.
  """
  tx = tx or optim.muon(1.0, shape_scaling="none", adam_learning_rate=1.0)
  adam = optax.adamw(1.0, b1=0.9, b2=0.999, weight_decay=0.0, nesterov=True)  # muon's defaults
  u, _ = _first_update(tx, grads, params)
  u_adam, _ = _first_update(adam, grads, params)
  lo, hi = band(SPECTRUM.min() / np.sqrt(np.sum(SPECTRUM**2)))
  assert hi / lo < 1.75  # the band of an orthogonalized update
  seen = set()
  for (path, a), b, g in zip(jax.tree_util.tree_leaves_with_path(u), jax.tree.leaves(u_adam),
                             jax.tree.leaves(grads), strict=True):
    s_path = optim.roles.path_str(path)
    if s_path not in hidden:
      np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7, err_msg=s_path)
      continue
    seen.add(s_path)
    for M, A, G in zip(as_matrices(s_path, -a), as_matrices(s_path, b), as_matrices(s_path, g),
                       strict=True):
      _, s = _spread(M)
      assert lo - 2e-3 <= s.min() and s.max() <= hi + 2e-3, (s_path, s.min(), s.max())
      s_g = np.linalg.svd(np.asarray(G, np.float64), compute_uv=False)
      np.testing.assert_allclose(s, ns_singular_values(s_g), atol=5e-3, err_msg=s_path)
      # A random sign matrix (AdamW's first step) has spread (1 + √r)/(1 − √r), r = m/n < 1
      # (Marchenko–Pastur): ≈ 10 at 2:3 but 3 at 1:4 (2.3 measured at 32 × 8), so thin blocks
      # get a lower bar, still above the Muon band's 1.66.
      m, n = sorted(A.shape)
      assert _spread(A)[0] >= (5.0 if n <= 1.5 * m else 2.0), s_path
  assert seen == set(hidden)


def _first_update(tx, grads, params):
  """`tx.update(grads, tx.init(params), params)`, init and update in one compiled program."""
  return jax.jit(lambda g, p: tx.update(g, tx.init(p), p))(grads, params)


def _plain(path, x):
  return np.asarray(x)[None]


def _qkv_in_three(path, x):
  """A fused `c_attn` `(D, 3D)` as its three `(D, D)` matrices (Muon's default); else `_plain`."""
  if path.endswith("c_attn/weight"):
    x = np.asarray(x)
    return x.reshape(x.shape[0], 3, -1).transpose(1, 0, 2)
  return _plain(path, x)


# ------------------------------------------------------------------------------ linen


class LinenLM(nn.Module):
  @nn.compact
  def __call__(self, tokens):
    x = nn.Embed(V, D)(tokens)
    x = x + nn.Dense(D, name="fc2")(nn.gelu(nn.Dense(F, name="fc1")(nn.LayerNorm()(x))))
    return nn.Dense(V, name="lm_head")(x)


def test_linen_model():
  params = jax.jit(LinenLM().init)(jax.random.key(0), np.zeros((1, 4), np.int32))
  roles = optim.labels(params)["params"]
  assert roles["fc1"] == {"kernel": "hidden", "bias": "vector"}
  assert roles["Embed_0"]["embedding"] == "embedding"
  assert roles["lm_head"]["kernel"] == "unembedding"
  assert roles["LayerNorm_0"] == {"scale": "vector", "bias": "vector"}
  hidden = {"params/fc1/kernel", "params/fc2/kernel"}
  shapes = {"params/fc1/kernel": (D, F), "params/fc2/kernel": (F, D)}
  grads = _grads(params, lambda p, s: (*shapes[p], lambda m: m[0], 1) if p in hidden else None)
  _check_muon(params, grads, hidden, _plain)
  # Every transform's default mask now finds the kernels (it used to fail in jax's tree utils).
  for tx in (optim.spectral_cap(0.5), optim.scale_by_condition(),
             optim.spectral_cap(0.5, mask=optim.select(names=("kernel",)))):
    state = jax.jit(tx.init)(params).inner_state
    per_leaf = state.v if isinstance(state, optim.SpectralState) else state.kappa
    assert {optim.roles.path_str(p) for p, _ in jax.tree_util.tree_leaves_with_path(per_leaf)
            } == hidden


# ------------------------------------------------------------------------------ Hugging Face


def _hf_llama():
  """A flat PyTorch-layout state dict (`weight` is `(d_out, d_in)`) of a one-layer Llama."""
  shapes = {
      "model.embed_tokens.weight": (V, D),
      "model.layers.0.input_layernorm.weight": (D,),
      "model.layers.0.self_attn.q_proj.weight": (D, D),
      "model.layers.0.self_attn.k_proj.weight": (D, D),
      "model.layers.0.self_attn.v_proj.weight": (D, D),
      "model.layers.0.self_attn.o_proj.weight": (D, D),
      "model.layers.0.post_attention_layernorm.weight": (D,),
      "model.layers.0.mlp.gate_proj.weight": (F, D),
      "model.layers.0.mlp.up_proj.weight": (F, D),
      "model.layers.0.mlp.down_proj.weight": (D, F),
      "model.norm.weight": (D,),
      "lm_head.weight": (V, D),
  }
  return {k: _array(np.full(s, 0.1)) for k, s in shapes.items()}


def _hf_gpt2():
  """A nested GPT-2 tree: `Conv1D` weights are `(d_in, d_out)`, `c_attn` is fused QKV."""
  ones, zeros = lambda *s: _array(np.ones(s)), lambda *s: _array(np.zeros(s))
  block = {"ln_1": {"weight": ones(D), "bias": zeros(D)},
           "attn": {"c_attn": {"weight": ones(D, 3 * D), "bias": zeros(3 * D)},
                    "c_proj": {"weight": ones(D, D), "bias": zeros(D)}},
           "mlp": {"c_fc": {"weight": ones(D, F)}, "c_proj": {"weight": ones(F, D)}}}
  return {"transformer": {"wte": {"weight": ones(V, D)}, "wpe": {"weight": ones(16, D)},
                          "h": {"0": block}, "ln_f": {"weight": ones(D)}}}


@pytest.mark.parametrize("tree", ["llama", "gpt2"])
def test_hugging_face_names(tree):
  params = _hf_llama() if tree == "llama" else _hf_gpt2()
  roles = {optim.roles.path_str(p): r
           for p, r in jax.tree_util.tree_leaves_with_path(optim.labels(params))}
  if tree == "llama":
    assert roles["model/embed_tokens/weight"] == "embedding"
    assert roles["lm_head/weight"] == "unembedding"
    assert roles["model/norm/weight"] == "vector"
    axes = optim.roles.place("model/layers/0/mlp/up_proj/weight", 2).axes
    assert axes == optim.MatrixAxes(-1, -2)  # PyTorch's (d_out, d_in)
  else:
    assert roles["transformer/wte/weight"] == roles["transformer/wpe/weight"] == "embedding"
    assert roles["transformer/h/0/ln_1/weight"] == "vector"
    assert optim.roles.place("transformer/h/0/attn/c_attn/weight", 2).axes == optim.MatrixAxes()
  hidden = {p for p, r in roles.items() if r == "hidden"}
  assert len(hidden) == (7 if tree == "llama" else 4)
  shape = {optim.roles.path_str(p): x.shape for p, x in jax.tree_util.tree_leaves_with_path(params)}
  grads = _grads(params, lambda p, s: (*s, lambda m: m[0], 1) if p in hidden else None)
  _check_muon(params, grads, hidden, _qkv_in_three)
  # With shape scaling, the update reads d_in, d_out from the layout: `width` scales a PyTorch
  # down_proj weight (D, F) = (d_out, d_in) by sqrt(max(1, D/F)) = 1, a (d_in, d_out) by 1.22.
  if tree == "llama":
    tx = optim.muon(1.0, adam_learning_rate=1.0)
    u, _ = _first_update(tx, grads, params)
    name = "model.layers.0.mlp.gate_proj.weight"  # (F, D) = (d_out, d_in): d_out/d_in = 1.5
    s = np.linalg.svd(np.asarray(-u[name], np.float64), compute_uv=False)
    s_ref = ns_singular_values(np.linalg.svd(np.asarray(grads[name], np.float64),
                                             compute_uv=False))
    np.testing.assert_allclose(s, np.sqrt(F / D) * s_ref, atol=5e-3)
    assert shape[name.replace(".", "/")] == (F, D)


# ------------------------------------------------------------------------------ nnx


class NnxLM(nnx.Module):
  def __init__(self, rngs):
    self.embed = nnx.Embed(V, D, rngs=rngs)
    self.norm = nnx.LayerNorm(D, rngs=rngs)
    self.qkv = nnx.Einsum("btd,dhk->bthk", (D, H, D // H), rngs=rngs)  # a (D, H, Dh) kernel
    self.fc1 = nnx.Linear(D, F, rngs=rngs)
    self.fc2 = nnx.Linear(F, D, rngs=rngs)
    self.lm_head = nnx.Linear(D, V, rngs=rngs)

  def __call__(self, tokens):
    x = self.embed(tokens)
    h = self.qkv(self.norm(x))
    x = x + h.reshape(h.shape[:-2] + (D,))
    x = x + self.fc2(nnx.gelu(self.fc1(x)))
    return self.lm_head(x)


PER_HEAD = {"qkv/kernel": optim.MatrixAxes(reduction=0, output=2)}  # H matrices (D, Dh)


def _per_head(path, x):
  x = np.asarray(x)
  return np.moveaxis(x, 1, 0) if path == "qkv/kernel" else x[None]


def test_nnx_state_and_einsum_axes():
  model = NnxLM(nnx.Rngs(0))
  params = nnx.as_pure(nnx.state(model, nnx.Param))
  roles = {optim.roles.path_str(p): r
           for p, r in jax.tree_util.tree_leaves_with_path(optim.labels(params))}
  assert roles["embed/embedding"] == "embedding" and roles["lm_head/kernel"] == "unembedding"
  assert roles["norm/scale"] == "vector" and roles["fc1/bias"] == "vector"
  hidden = {"fc1/kernel", "fc2/kernel", "qkv/kernel"}
  assert {p for p, r in roles.items() if r == "hidden"} == hidden
  # The Einsum kernel's matrix is ambiguous: muon asks for its axes, in one line.
  with pytest.raises(ValueError, match=r"which axes are the matrix of 'qkv/kernel' \(32, 4, 8\)"):
    optim.muon(0.02).init(params)
  shapes = {"fc1/kernel": (D, F, lambda m: m[0], 1), "fc2/kernel": (F, D, lambda m: m[0], 1),
            "qkv/kernel": (D, D // H, lambda m: np.moveaxis(m, 0, 1), H)}
  grads = _grads(params, lambda p, s: shapes.get(p))
  tx = optim.muon(1.0, shape_scaling="none", adam_learning_rate=1.0, matrix_axes=PER_HEAD)
  _check_muon(params, grads, hidden, _per_head, tx)
  # The variables themselves (what `nnx.Optimizer` passes to `init`) label the same way.
  with_vars = optim.labels(nnx.state(model, nnx.Param))
  assert with_vars["fc1"]["kernel"].get_value() == "hidden"


def test_nnx_optimizer_trains_with_orthogonal_hidden_updates():
  """A small nnx model trained by `nnx.Optimizer(model, optim.muon(...))`: every step's fc1/fc2
  update has the singular values of Newton–Schulz applied to Muon's momentum (computed here,
  from the gradient and the state), and the loss falls."""
  model = NnxLM(nnx.Rngs(1))
  lr, beta = 0.02, 0.95
  tx = optim.muon(lr, beta=beta, shape_scaling="none", adam_learning_rate=3e-3,
                  matrix_axes=PER_HEAD)
  opt = nnx.Optimizer(model, tx, wrt=nnx.Param)
  tokens = np.random.default_rng(2).integers(0, V // 4, (8, 17), dtype=np.int32)  # a sub-vocab

  def loss_fn(model, batch):
    logits = model(batch[:, :-1])
    return optax.softmax_cross_entropy_with_integer_labels(logits, batch[:, 1:]).mean()

  @nnx.jit
  def step(model, opt, batch):
    loss, grads = nnx.value_and_grad(loss_fn)(model, batch)
    before = {k: getattr(model, k).kernel.get_value() for k in ("fc1", "fc2")}
    opt.update(model, grads)
    after = {k: getattr(model, k).kernel.get_value() for k in ("fc1", "fc2")}
    return loss, {k: after[k] - before[k] for k in after}, {k: getattr(grads, k).kernel.get_value()
                                                           for k in after}

  mu = {"fc1": np.zeros((D, F)), "fc2": np.zeros((F, D))}
  losses = []
  for t in range(1, 6):
    loss, delta, g = step(model, opt, tokens)
    losses.append(float(loss))
    for k in mu:
      g_k = np.asarray(g[k], np.float64)
      mu[k] = beta * mu[k] + (1 - beta) * g_k
      mu_hat = beta * mu[k] / (1 - beta ** (t + 1)) + (1 - beta) * g_k / (1 - beta**t)
      s_ref = ns_singular_values(np.linalg.svd(mu_hat, compute_uv=False))
      s = np.linalg.svd(-np.asarray(delta[k], np.float64) / lr, compute_uv=False)
      np.testing.assert_allclose(s, s_ref, atol=1e-2, err_msg=f"{k} step {t}")
      # The leading directions are in the band (the polynomial's maximum is 1.2024).
      assert s[:8].min() >= 0.6 and s.max() <= 1.21
  assert losses[-1] < losses[0] - 0.1


# ------------------------------------------------------------------------------ errors


def _one_line(excinfo, *needles):
  msg = str(excinfo.value)
  assert "\n" not in msg
  for n in needles:
    assert n in msg, msg


def test_unlabelled_tree_raises_one_line():
  params = {"encoder": {"proj_x": _array(np.ones((D, D))), "gain": _array(np.ones(D))},
            "mixer": {"table": _array(np.ones((4, D, D)))}}
  for build in (lambda: optim.muon(0.02), lambda: optim.spectral_cap(1.0),
                lambda: optim.scale_by_condition(), lambda: optim.spectral_normalize()):
    with pytest.raises(ValueError) as e:
      build().init(params)
    _one_line(e, "'encoder/proj_x' (32, 32)", "'mixer/table' (4, 32, 32)", "label_fn=",
              "labels_by_shape")
  # The fixes: optax's every-2-D rule, or overrides in our table; then it runs.
  tx = optim.muon(0.02, label_fn=optim.labels_by_shape)
  u, _ = _first_update(tx, params, params)
  assert u["mixer"]["table"].shape == (4, D, D)
  label_fn = functools.partial(optim.labels, overrides={"proj_x": "hidden", "table": "vector"})
  assert label_fn(params)["encoder"] == {"proj_x": "hidden", "gain": "vector"}


def test_nothing_selected_raises_one_line():
  vectors_only = {"embed": {"embedding": _array(np.ones((V, D)))},
                  "norm": {"scale": _array(np.ones(D))}}
  with pytest.raises(ValueError) as e:
    optim.muon(0.02).init(vectors_only)
  _one_line(e, "no leaf has a role in ['hidden']", "'embed/embedding' (40, 32)", "label_fn=")
  for tx in (optim.spectral_cap(1.0), optim.scale_by_condition(),
             optim.spectral_cap(1.0, mask=optim.select(names=("kernel",)))):
    with pytest.raises(ValueError) as e:
      tx.init(vectors_only)
    _one_line(e, "no leaf has a role", "'norm/scale' vector")
  with pytest.raises(ValueError) as e:
    optim.orthogonal_heads(1e-3, n_heads=4).update(vectors_only, optax.EmptyState(),
                                                   vectors_only)
  _one_line(e, "no leaf is an attention projection", "layout_fn=")
  # An explicit label_fn is trusted: nothing selected is then a no-op, not a crash.
  tx = optim.spectral_cap(1.0, mask=optim.select(label_fn=optim.labels_by_shape,
                                                 names=("nothing",)))
  u, _ = _first_update(tx, vectors_only, vectors_only)
  assert jax.tree.all(jax.tree.map(lambda a, b: bool(np.all(np.asarray(a) == np.asarray(b))), u,
                                   vectors_only))


def test_ambiguous_stacks_need_explicit_axes():
  """A scanned linen stack `(L, d_in, d_out)`: muon and the default masks refuse to guess;
  `MatrixAxes(-2, -1)` orthogonalizes each layer's matrix on its own."""
  L = 3
  params = {"params": {"layers": {"fc1": {"kernel": _array(np.ones((L, D, F)))}}}}
  for build in (lambda: optim.muon(0.02), lambda: optim.spectral_cap(1.0)):
    with pytest.raises(ValueError) as e:
      build().init(params)
    _one_line(e, "'params/layers/fc1/kernel' (3, 32, 48)")
  g = {"params": {"layers": {"fc1": {"kernel": _array(np.stack(
      [_matrix_grad(l, D, F) for l in range(L)]))}}}}
  tx = optim.muon(1.0, shape_scaling="none", matrix_axes=optim.MatrixAxes(-2, -1))
  u, _ = _first_update(tx, g, params)
  lo, hi = band(SPECTRUM.min() / np.sqrt(np.sum(SPECTRUM**2)))
  for l in range(L):
    s = np.linalg.svd(-np.asarray(u["params"]["layers"]["fc1"]["kernel"], np.float64)[l],
                      compute_uv=False)
    assert lo - 2e-3 <= s.min() and s.max() <= hi + 2e-3


def test_matrix_axes_round_trip_and_equivalence():
  """`as_matrices` against numpy's transpose/reshape; orthogonalizing an Einsum kernel as one
  `(D, H·Dh)` matrix equals orthogonalizing its reshape."""
  x = _array(np.random.default_rng(0).normal(size=(5, D, H, 8)))
  M, restore = optim.roles.as_matrices(x, optim.MatrixAxes(reduction=1, output=(2, 3)))
  np.testing.assert_array_equal(M, np.asarray(x).reshape(5, D, H * 8))
  np.testing.assert_array_equal(restore(M), x)
  M, restore = optim.roles.as_matrices(x, optim.MatrixAxes(reduction=(3, 1), output=0))
  np.testing.assert_array_equal(M, np.transpose(np.asarray(x), (2, 3, 1, 0)).reshape(H, 8 * D, 5))
  np.testing.assert_array_equal(restore(M), x)
  with pytest.raises(ValueError, match="distinct"):
    optim.roles.as_matrices(x, optim.MatrixAxes(1, 1))
  w = np.random.default_rng(1).normal(size=(D, H, 8))
  k = {"w": _array(w)}
  tx = optim.scale_by_muon(0.0, nesterov=False, shape_scaling="none",
                           matrix_axes=optim.MatrixAxes(0, (1, 2)))
  u, _ = tx.update(k, tx.init(k))  # eager, both: the same op sequence to within rtol 1e-6
  flat = {"w": _array(w.reshape(D, H * 8))}
  ref = optim.scale_by_muon(0.0, nesterov=False, shape_scaling="none")
  np.testing.assert_allclose(np.asarray(u["w"]).reshape(D, H * 8),
                             ref.update(flat, ref.init(flat))[0]["w"], rtol=1e-6, atol=1e-7)
