"""The exact variance of token-level policy-gradient estimators on tabular policies.

Source: OTB, Li et al., *The Optimal Token Baseline*, arXiv 2602.07078 (O1-O4, O6).

Setting: a :class:`~tailtheory.core.tabular.TabularPolicy` (one logit row per context, every sequence
enumerated with its probability ``q_n``). The score of position ``t`` is
``s_t = d log pi(y_t|c_t) / d logits``: the vector ``e_{y_t} - p(c_t)`` in row ``c_t``, zero
elsewhere. For a position-dependent baseline ``B`` (T,) the token-level estimator is
``g_B = sum_t s_t (G_t - B_t) m_t``; it is unbiased for every ``B``, and its variance
``V(B) = E ||g_B||^2 - ||grad J||^2`` is the quadratic ``B'MB - 2 B'c + const`` with
``M_tu = E[<s_t, s_u> m_t m_u]``, ``c_t = E[<s_t, sum_u s_u G_u m_u> m_t]``.

Claims (ids of docs/claims.md):
    O1  w_t = ||s_t||^2                                         :func:`score_gram` (diagonal),
                                                                :func:`autograd_sq_norms`
    O2  OTB minimises the prefix surrogate J(B)                 :func:`prefix_surrogate`,
                                    :func:`fd_gradient`, :func:`surrogate_argmin_residuals`
    O3  B = M^-1 c minimises V(B), not OTB                       :func:`variance_quadratic`
    O4  V(OTB) / V(mean) < 1                                     :func:`population_baselines`,
                                                                :func:`adversarial_otb_ratio`
    O6  N = 4 with OTB matches N = 32 without                     :func:`group_study`

The profile tables shared by the checks and notebook 03 are in :mod:`tailtheory.otb.experiments`.

``tied=True`` adds one logit-bias vector shared by every context (``z_c + b``): scores of
different positions then overlap, the case where the proxy ``W_t`` stops being the prefix norm.

Shapes: N sequences of the policy, T positions, P contexts, V tokens.
"""

from __future__ import annotations

import itertools
from typing import Any, Callable

import torch

from tailtheory.core.tabular import TabularPolicy, random_rewards
from tailtheory.engine.advantages import dr_grpo_advantages, grpo_advantages, rloo_advantages
from tailtheory.otb.baselines import broadcast_returns, optimal_token_baseline, realized_energy


def logit_scores(pol: TabularPolicy) -> torch.Tensor:
    """``e_{y_t} - p(c_t)``: the non-zero row of each position's score, 0 where dead.

    Source: OTB (O1), S1 applied per context. Shapes: -> (N, T, V).
    """
    p = pol.probs()[pol.ctx]                                             # (N, T, V)
    e = torch.nn.functional.one_hot(pol.seqs, pol.V).to(p.dtype)         # (N, T, V)
    return (e - p) * pol.mask[..., None]


def score_gram(pol: TabularPolicy, tied: bool = False) -> torch.Tensor:
    """Inner products ``<s_t, s_u>`` of the full parameter scores within each sequence.

    Source: OTB (O1, O2). Formula: ``<s_t, s_u> = [c_t = c_u] <r_t, r_u>`` with
    ``r_t = e_{y_t} - p(c_t)`` (tabular; a sequence never revisits a context, so this is
    diagonal with ``w_t`` on it), plus ``<r_t, r_u>`` for the shared bias when ``tied``.
    Shapes: -> (N, T, T).
    """
    r = logit_scores(pol)                                                # (N, T, V)
    inner = torch.einsum("ntv,nuv->ntu", r, r)                           # (N, T, T)
    same = pol.ctx[:, :, None] == pol.ctx[:, None, :]                    # (N, T, T)
    return inner * same + (inner if tied else 0)


def prefix_sq_norms(gram: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """True squared prefix score norms ``||S_<=t||^2 = sum_{j,k<=t} <s_j, s_k>``, 0 where dead.

    Source: OTB (O2). Shapes: gram (N, T, T), mask (N, T) -> (N, T).
    """
    cum = gram.cumsum(1).cumsum(2)                                       # (N, T, T)
    return torch.diagonal(cum, dim1=1, dim2=2) * mask


def autograd_sq_norms(pol: TabularPolicy) -> torch.Tensor:
    """The slow reference of O1: ``||d log pi(y_t|c_t) / d logits||^2`` over the whole (P, V)
    logit table by autograd, one backward per alive token; 0 where dead.

    Source: OTB (O1). Shapes: -> (N, T).
    """
    out = torch.zeros(pol.seqs.shape, dtype=torch.float64)
    for n, t in pol.mask.nonzero().tolist():
        z = pol.logits.clone().requires_grad_(True)
        (grad,) = torch.autograd.grad(torch.log_softmax(z[pol.ctx[n, t]], -1)[pol.seqs[n, t]], z)
        out[n, t] = grad.pow(2).sum()
    return out


def fd_gradient(f: Callable[[torch.Tensor], Any], B: torch.Tensor, h: float) -> torch.Tensor:
    """Central finite differences ``(f(B + h e_t) - f(B - h e_t)) / 2h`` for every ``t``.

    Exact on a quadratic such as :func:`prefix_surrogate` up to rounding. Shapes: B (T,) -> (T,).
    """
    e = torch.eye(len(B), dtype=torch.float64) * h
    return torch.stack([torch.as_tensor((f(B + e[t]) - f(B - e[t])) / (2 * h))
                        for t in range(len(B))])


def surrogate_argmin_residuals(n: int = 4):
    """O2's closed form by sympy: ``argmin_b sum_i a_i (g_i - b)^2 - sum a_i g_i / sum a_i`` and
    ``d^2/db^2 - 2 sum a_i`` for ``n`` positive weights ``a_i``; both are 0 when OTB's weighted
    mean is the (unique) minimiser of each position's term of the prefix surrogate.

    Source: OTB (O2). Returns two sympy expressions.
    """
    import sympy as sp

    a = sp.symbols(f"a0:{n}", positive=True)
    g = sp.symbols(f"g0:{n}", real=True)
    b = sp.Symbol("b", real=True)
    J = sum(ai * (gi - b) ** 2 for ai, gi in zip(a, g))
    (sol,) = sp.solve(sp.diff(J, b), b)
    return (sp.simplify(sol - sum(x * y for x, y in zip(a, g)) / sum(a)),
            sp.simplify(sp.diff(J, b, 2) - 2 * sum(a)))


def exact_gradient(pol: TabularPolicy, returns: Any, B: Any = None) -> torch.Tensor:
    """``E[g_B]`` in logit space; equal to ``grad J`` for every baseline ``B``.

    Source: OTB (section 6). Formula: ``sum_n q_n sum_t (G_t - B_t) m_t (e_{y_t} - p(c_t))`` in
    row ``c_t``. Shapes: returns (N,) or (N, T), B (T,) or None -> (P, V).
    """
    A = _adv(pol, returns, B)                                            # (N, T)
    vals = (pol.seq_prob[:, None, None] * A[..., None] * logit_scores(pol))
    out = torch.zeros_like(pol.logits)
    return out.index_add_(0, pol.ctx.flatten(), vals.reshape(-1, pol.V))


def _adv(pol: TabularPolicy, returns: Any, B: Any) -> torch.Tensor:
    G = broadcast_returns(returns, pol.mask)                             # (N, T)
    if B is None:
        return G
    b = torch.as_tensor(B, dtype=torch.float64)
    if b.shape != (pol.T,):
        raise ValueError(f"B must be one baseline per position, shape ({pol.T},), got "
                         f"{tuple(b.shape)}")
    return (G - b) * pol.mask


def variance_quadratic(pol: TabularPolicy, returns: Any, gram: torch.Tensor | None = None):
    """``(M, c, const)`` with ``E||g_B||^2 = B'MB - 2 B'c + const``.

    Source: OTB (O3). Formula: ``M = E[K]``, ``c = E[K G]``, ``const = E[G'KG]`` where
    ``K_tu = <s_t, s_u> m_t m_u`` and ``G`` is zero where dead.
    Shapes: -> M (T, T), c (T,), const ().
    """
    K = score_gram(pol) if gram is None else gram                         # (N, T, T)
    K = K * pol.mask[:, :, None] * pol.mask[:, None, :]
    G = broadcast_returns(returns, pol.mask)                             # (N, T)
    q = pol.seq_prob
    KG = torch.einsum("ntu,nu->nt", K, G)                                # (N, T)
    return (torch.einsum("n,ntu->tu", q, K), q @ KG, q @ (G * KG).sum(-1))


def baseline_variance(pol: TabularPolicy, returns: Any, B: Any) -> torch.Tensor:
    """Exact variance ``V(B) = E||g_B - grad J||^2`` of the token-level estimator.

    Source: OTB (O3, O4). Formula: ``sum_n q_n A_n' K_n A_n - ||grad J||^2`` with
    ``A = (G - B) m``. Shapes: returns (N,) or (N, T), B (T,) -> ().
    """
    A = _adv(pol, returns, B)                                            # (N, T)
    second = pol.seq_prob @ torch.einsum("nt,ntu,nu->n", A, score_gram(pol), A)
    return second - exact_gradient(pol, returns).pow(2).sum()


def optimal_baseline(pol: TabularPolicy, returns: Any) -> torch.Tensor:
    """The variance-minimising position baseline ``B = M^-1 c`` (O3).

    Source: OTB (O3). Positions no sequence reaches leave ``M`` singular: the least-squares
    (minimum-norm) solution is used, which gives them baseline 0. Shapes: -> (T,).
    """
    M, c, _ = variance_quadratic(pol, returns)
    return torch.linalg.lstsq(M, c[:, None], driver="gelsd").solution[:, 0]


def weighted_baseline(pol: TabularPolicy, returns: Any, weight: torch.Tensor) -> torch.Tensor:
    """``B_t = E[weight_t G_t m_t] / E[weight_t m_t]``: the population limit of a weighted
    group mean (0 where the denominator is 0).

    Source: OTB (section 6) with ``weight = W`` (the limit of ``B*``).
    Shapes: weight (N, T) -> (T,).
    """
    G = broadcast_returns(returns, pol.mask)
    wm = weight * pol.mask
    den = pol.seq_prob @ wm
    return torch.where(den > 0, pol.seq_prob @ (wm * G) / torch.where(den > 0, den, 1), 0.0)


def population_baselines(pol: TabularPolicy, returns: Any) -> dict[str, torch.Tensor]:
    """Position baselines in the infinite-group limit, by name (each ``(T,)``).

    ``zero`` (plain REINFORCE); ``mean`` the group mean (``E[R]`` for an outcome reward, the
    alive mean of ``G_t`` for rewards-to-go); ``otb`` weighted by the proxy ``W_t``; ``otb_true``
    weighted by the true prefix norm; ``token`` weighted by ``w_t`` alone; ``opt`` = ``M^-1 c``.
    Source: OTB (O3, O4).
    """
    gram = score_gram(pol)
    w = torch.diagonal(gram, dim1=1, dim2=2)                             # (N, T)
    R = torch.as_tensor(returns, dtype=torch.float64)
    mean = (pol.expect(R).expand(pol.T) if R.ndim == 1
            else weighted_baseline(pol, returns, torch.ones_like(w)))
    return {"zero": torch.zeros(pol.T, dtype=torch.float64), "mean": mean,
            "otb": weighted_baseline(pol, returns, w.cumsum(-1)),
            "otb_true": weighted_baseline(pol, returns, prefix_sq_norms(gram, pol.mask)),
            "token": weighted_baseline(pol, returns, w),
            "opt": optimal_baseline(pol, returns)}


def prefix_surrogate(pol: TabularPolicy, returns: Any, B: Any,
                     prefix_sq: torch.Tensor) -> torch.Tensor:
    """OTB's objective ``J(B) = sum_t E[||S_<=t||^2 (G_t - B_t)^2 m_t]`` (O2).

    Source: OTB (O2). ``prefix_sq`` is ``||S_<=t||^2`` (:func:`prefix_sq_norms`) or the proxy
    ``W_t``. Shapes: B (T,), prefix_sq (N, T) -> ().
    """
    A = _adv(pol, returns, B)
    return pol.seq_prob @ (prefix_sq * A**2).sum(-1)


def adversarial_otb_ratio(V: int, T: int, eos: int | None, seed: int = 0, steps: int = 150,
                          lr: float = 0.1) -> tuple[float, TabularPolicy, torch.Tensor]:
    """Search for ``V(OTB) / V(mean) >= 1``: gradient ascent of the ratio over the logits and
    the rewards (``R = sigmoid(u)`` in (0, 1)), from a seeded random start (O4 witness).

    Source: OTB (O4). Returns ``(ratio, policy, rewards)`` at the end of the ascent, the ratio
    recomputed without gradients.
    """
    pol0 = TabularPolicy.random(V, T, eos=eos, sharpness=2.0, seed=seed)
    gen = torch.Generator().manual_seed(seed)
    z = pol0.logits.clone().requires_grad_(True)
    u = torch.randn(pol0.seqs.shape[0], generator=gen, dtype=torch.float64).requires_grad_(True)
    opt = torch.optim.Adam([z, u], lr=lr)
    for _ in range(steps):
        ratio = _otb_mean_ratio(pol0.with_logits(z), torch.sigmoid(u))
        opt.zero_grad()
        (-ratio).backward()
        opt.step()
    pol, R = pol0.with_logits(z.detach()), torch.sigmoid(u.detach())
    return float(_otb_mean_ratio(pol, R)), pol, R


def _otb_mean_ratio(pol: TabularPolicy, R: torch.Tensor) -> torch.Tensor:
    w = torch.diagonal(score_gram(pol), dim1=1, dim2=2)                  # (N, T)
    otb = weighted_baseline(pol, R, w.cumsum(-1))
    return (baseline_variance(pol, R, otb)
            / baseline_variance(pol, R, pol.expect(R).expand(pol.T)))


# --- O6: finite groups ---------------------------------------------------------------------------

ZERO_UPDATE_RTOL = 1e-6
"""A group estimate shorter than this fraction of ``||grad J||`` counts as no update (cosine 0):
a group with equal rewards gives GRPO exactly 0 and OTB a residue of order ``OTB_EPS``."""


def tabular_energy(pol: TabularPolicy) -> torch.Tensor:
    """``W (N, T)`` of every sequence, through the public :func:`realized_energy`.

    Source: OTB (section 6). Shapes: -> (N, T).
    """
    sum_p2 = pol.probs().pow(2).sum(-1)[pol.ctx]                         # (N, T)
    return realized_energy(sum_p2, pol.token_logp, pol.mask)


GROUP_METHODS = {"grpo": grpo_advantages, "dr_grpo": dr_grpo_advantages,
                 "rloo": rloo_advantages, "otb": optimal_token_baseline}
"""The estimators :func:`group_estimates` compares, by name (``otb`` with the tabular energy)."""


def group_estimates(pol: TabularPolicy, rewards: Any, idx: torch.Tensor,
                    method: str) -> torch.Tensor:
    """Group gradient estimates ``(1/N) sum_i sum_t s^i_t A^i_t`` for groups of sampled sequences.

    Source: OTB (O6). ``idx`` holds ``K`` groups of ``N`` sequence indices; ``method`` one of
    :data:`GROUP_METHODS`. Shapes: rewards (N_seq,), idx (K, N) -> (K, P*V).
    """
    if method not in GROUP_METHODS:
        raise ValueError(f"unknown advantage estimator {method!r}; valid: "
                         f"{', '.join(GROUP_METHODS)}")
    K, N = idx.shape
    R = torch.as_tensor(rewards, dtype=torch.float64)
    flat = idx.flatten()                                                 # (K*N,)
    gid = torch.arange(K).repeat_interleave(N)                           # (K*N,)
    if method == "otb":
        A = optimal_token_baseline(R[flat], tabular_energy(pol)[flat], pol.mask[flat], gid)
    else:
        A = GROUP_METHODS[method](R[flat], gid, pol.mask[flat])          # (K*N, T)
    vals = (A[..., None] * logit_scores(pol)[flat]).reshape(K, -1, pol.V)  # (K, N*T, V)
    rows = pol.ctx[flat].reshape(K, -1, 1).expand(-1, -1, pol.V)         # (K, N*T, V)
    out = torch.zeros(K, pol.logits.shape[0], pol.V, dtype=torch.float64)
    return out.scatter_add_(1, rows, vals).reshape(K, -1) / N


def group_quality(est: torch.Tensor, g: torch.Tensor) -> dict[str, float]:
    """Relative MSE, mean cosine, relative bias and zero-update rate of estimates against ``g``.

    Source: OTB (O6). Shapes: est (K, D), g (D,) -> floats.
    """
    gn = g.norm()
    norms = est.norm(dim=1)
    zero = norms <= ZERO_UPDATE_RTOL * gn
    cos = torch.where(zero, 0.0, est @ g / (norms.clamp_min(1e-300) * gn))
    return {"rel_mse": float(((est - g).pow(2).sum(1) / gn**2).mean()),
            "cosine": float(cos.mean()), "cosine_se": float(cos.std() / len(cos) ** 0.5),
            "rel_bias": float((est.mean(0) - g).norm() / gn),
            "zero_frac": float(zero.double().mean())}


def group_study(pol: TabularPolicy, rewards: Any, Ns=(2, 4, 8, 16, 32), n_groups: int = 500,
                methods=("grpo", "rloo", "otb"), seed: int = 0) -> list[dict]:
    """Finite-group quality of each method at each group size, against the exact gradient.

    Source: OTB (O6). The same sampled groups serve every method (common random numbers).
    Returns one row per (method, N): ``method, N`` and the keys of :func:`group_quality`.
    """
    g = exact_gradient(pol, rewards).flatten()
    gen = torch.Generator().manual_seed(seed)
    rows = []
    for N in Ns:
        idx = torch.multinomial(pol.seq_prob, n_groups * N, replacement=True,
                                generator=gen).reshape(n_groups, N)
        for m in methods:
            rows.append({"method": m, "N": N, **group_quality(group_estimates(pol, rewards,
                                                                              idx, m), g)})
    return rows


def matching_group_size(rows: list[dict], metric: str = "cosine", reference=("grpo", 32)):
    """Smallest ``N`` at which each method reaches the reference method's quality at its ``N``.

    Source: OTB (O6). Higher is better for ``cosine``, lower for ``rel_mse``. Returns
    ``{method: N or None}`` (None: never within the sizes studied).
    """
    ref = next(r[metric] for r in rows if (r["method"], r["N"]) == reference)
    better = (lambda v: v >= ref) if metric == "cosine" else (lambda v: v <= ref)
    out = {}
    for r in sorted(rows, key=lambda r: r["N"]):
        out.setdefault(r["method"], None)
        if out[r["method"]] is None and better(r[metric]):
            out[r["method"]] = r["N"]
    return out


# --- sweeps (claims O3, O4, O6 and notebook 03) -------------------------------------------------

def binary_rewards(pol: TabularPolicy, seed: int = 0, rate: float = 0.5) -> torch.Tensor:
    """``(N,)`` verifiable 0/1 rewards: each sequence correct with probability ``rate``."""
    return (random_rewards(pol, seed=seed) < rate).double()


def variance_sweep(Vs=(3,), Ts=(2, 3, 4, 5), sharpness=(0.5, 1.0, 2.0, 4.0), seeds=(0, 1),
                   eos=(None, 0)) -> list[dict]:
    """Exact ``V(B) / V(M^-1 c)`` for every baseline of :func:`population_baselines` over a grid
    of random tabular policies with binary rewards (O3, O4). One row per policy.
    """
    rows = []
    for V, T, e, sh, seed in itertools.product(Vs, Ts, eos, sharpness, seeds):
        pol = TabularPolicy.random(V, T, eos=e, sharpness=sh, seed=seed)
        R = binary_rewards(pol, seed=seed + 1000)
        var = {k: float(baseline_variance(pol, R, b)) for k, b in
               population_baselines(pol, R).items()}
        rows.append({"V": V, "T": T, "eos": -1 if e is None else e, "sharpness": sh,
                     "seed": seed, **{f"ratio_{k}": var[k] / var["opt"] for k in var},
                     "otb_over_mean": var["otb"] / var["mean"]})
    return rows


def group_sweep(policies=((3, 4, None, 1.0), (3, 4, 0, 2.0)), Ns=(2, 4, 8, 16, 32),
                n_groups: int = 400, methods=("grpo", "dr_grpo", "rloo", "otb"),
                seed: int = 0) -> list[dict]:
    """:func:`group_study` averaged over policies ``(V, T, eos, sharpness)`` (binary rewards).

    Source: OTB (O6). One row per (method, N), metrics averaged over the policies.
    """
    acc: dict[tuple, list[dict]] = {}
    for i, (V, T, e, sh) in enumerate(policies):
        pol = TabularPolicy.random(V, T, eos=e, sharpness=sh, seed=seed + i)
        for r in group_study(pol, binary_rewards(pol, seed=seed + i), Ns, n_groups, methods,
                             seed=seed + i):
            acc.setdefault((r["method"], r["N"]), []).append(r)
    return [{"method": m, "N": N, **{k: sum(r[k] for r in rs) / len(rs)
                                     for k in rs[0] if k not in ("method", "N")}}
            for (m, N), rs in acc.items()]


__all__ = ["logit_scores", "score_gram", "prefix_sq_norms", "exact_gradient",
           "variance_quadratic", "baseline_variance", "optimal_baseline", "weighted_baseline",
           "population_baselines", "prefix_surrogate", "adversarial_otb_ratio", "ZERO_UPDATE_RTOL",
           "tabular_energy", "group_estimates", "group_quality", "group_study",
           "matching_group_size", "binary_rewards", "variance_sweep", "group_sweep",
           "autograd_sq_norms", "fd_gradient", "surrogate_argmin_residuals"]
