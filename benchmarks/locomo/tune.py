"""Fit the weights of hippobot's ranking on LoCoMo's tuning half (conversations 1-5).

``python -m benchmarks.locomo.tune --data PATH/locomo10.json`` builds the workspaces as the
benchmark does, asks :meth:`RecallIndex.candidates` for every question's candidates and
their evidence (:mod:`hippobot.recall.ranking`), labels a candidate 1 when it is one of the
question's evidence turns, and fits per mode (keyword alone, hybrid): a logistic regression,
a listwise fit from there (:func:`fit_listwise`), a coordinate search on R@5 among the
weights the ranking allows (:func:`allowed`), then Platt scaling (:func:`calibrate`). It
prints each ``Weights(...)`` and its R@k on the same questions; the last is what
``ranking.py`` holds. Only conversations 1-5 are allowed: the held-out half is for
reporting.

The memory and history weights cannot be learnt here (LoCoMo is only conversation turns):
they stay as set in ``ranking.py``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import numpy as np

from hippobot.recall import RecallIndex
from hippobot.recall.ranking import FEATURES, HYBRID, KEYWORD, Weights, features, logit

from . import dataset
from .__main__ import RESULTS, make_embedder
from .ingest import ingest
from .retrieval import EVAL_CATEGORIES

_KEYWORD_FEATURES = ("words", "cover", "cover_near", "cover_wide", "length", "asks", "speaker", "dated")
_FITTED = {
    "keyword": _KEYWORD_FEATURES,
    "hybrid": ("meaning", "context", *_KEYWORD_FEATURES),
}


def collect(convs: list[dataset.Conversation], work: Path, embedder: object | None) -> dict:
    """Per mode: a list of questions, each (feature matrix, labels, evidence count)."""
    out: dict[str, list[tuple[np.ndarray, np.ndarray, list]]] = {"keyword": [], "hybrid": []}
    for conv in convs:
        data = ingest(conv, work / conv.sample_id)
        now = (max(s.started for s in conv.sessions) + timedelta(days=1)).timestamp()
        modes = {"keyword": RecallIndex(data.workspace, auto_sync=False)}
        modes["keyword"].sync()
        if embedder is not None:
            hybrid = RecallIndex(data.workspace, auto_sync=False, embedder=embedder)  # type: ignore[arg-type]
            hybrid.embed_pending(max_docs=10**9, batch_size=64)
            modes["hybrid"] = hybrid
        for mode, index in modes.items():
            for q in conv.questions:
                if q.category not in EVAL_CATEGORIES:
                    continue
                cands = index.candidates(q.text, now=now)
                evs = [ev for ev, _ in cands]
                labels = np.array([data.dia_id(c) in q.evidence for _, c in cands], dtype=float)
                x = np.array([features(ev) for ev in evs]) if evs else np.zeros((0, len(FEATURES)))
                out[mode].append((x, labels, evs))
        if embedder is not None:
            embedder.save()  # type: ignore[attr-defined]
        sys.stderr.write(f"{conv.sample_id}: collected\n")
    return out


def recall_at(questions: list, w: Weights, ks: tuple[int, ...] = (1, 5, 10)) -> dict[int, float]:
    found = dict.fromkeys(ks, 0)
    for _x, labels, evs in questions:
        order = np.argsort([-logit(ev, w) for ev in evs], kind="stable")
        for k in ks:
            if labels[order[:k]].any():
                found[k] += 1
    return {k: round(v / max(len(questions), 1), 4) for k, v in found.items()}


def fit(questions: list, names: tuple[str, ...], base: Weights, l2: float = 1e-3) -> Weights:
    """Logistic regression on the named features (others keep ``base``'s weights)."""
    cols = [FEATURES.index(n) for n in names]
    fixed = [i for i in range(len(FEATURES)) if i not in cols]
    xs = np.concatenate([x for x, _, _ in questions if len(x)])
    ys = np.concatenate([y for x, y, _ in questions if len(x)])
    offset = xs[:, fixed] @ np.array([getattr(base, FEATURES[i]) for i in fixed])
    a = np.hstack([xs[:, cols], np.ones((len(xs), 1))])
    theta = np.zeros(a.shape[1])
    for _ in range(3000):  # Newton steps converge in a few; this is cheap
        p = 1 / (1 + np.exp(-(a @ theta + offset)))
        grad = a.T @ (p - ys) / len(ys) + l2 * np.r_[theta[:-1], 0]
        hess = (a * (p * (1 - p))[:, None]).T @ a / len(ys) + l2 * np.eye(a.shape[1])
        step = np.linalg.solve(hess, grad)
        theta -= step
        if np.abs(step).max() < 1e-9:
            break
    values = {n: round(float(theta[i]), 3) for i, n in enumerate(names)}
    return replace(base, bias=round(float(theta[-1]), 3), **values)


def fit_listwise(questions: list, names: tuple[str, ...], base: Weights, l2: float = 1e-2) -> Weights:
    """The weights that make a question's evidence turns likely under a softmax over its
    candidates (a conditional logit: what R@k rewards is the order within a question,
    which a pointwise fit only approximates). BFGS with a backtracking line search; the
    bias does not change an order, so it is left to :func:`calibrate`."""
    cols = [FEATURES.index(n) for n in names]
    data = [(x[:, cols], y.astype(bool)) for x, y, _ in questions if len(x) and y.any()]

    def loss(theta: np.ndarray) -> tuple[float, np.ndarray]:
        total, grad = 0.0, np.zeros_like(theta)
        for x, y in data:
            s = x @ theta
            e = np.exp(s - s.max())
            z, ze = e.sum(), e[y].sum()
            total -= np.log(ze) - np.log(z)
            grad -= (e[y] @ x[y]) / ze - (e @ x) / z
        n = len(data)
        return total / n + l2 * theta @ theta, grad / n + 2 * l2 * theta

    theta = np.array([getattr(base, n) for n in names], dtype=float)
    inv = np.eye(len(names))
    f, g = loss(theta)
    for _ in range(200):
        step = -inv @ g
        t = 1.0
        while True:
            f_new, g_new = loss(theta + t * step)
            if f_new <= f + 1e-4 * t * (g @ step) or t < 1e-8:
                break
            t /= 2
        s_vec, y_vec = t * step, g_new - g
        theta, f, g = theta + s_vec, f_new, g_new
        if np.abs(s_vec).max() < 1e-7:
            break
        sy = s_vec @ y_vec
        if sy > 1e-12:  # the BFGS update of the inverse Hessian
            rho = 1.0 / sy
            eye = np.eye(len(names))
            inv = (eye - rho * np.outer(s_vec, y_vec)) @ inv @ (eye - rho * np.outer(y_vec, s_vec))
            inv += rho * np.outer(s_vec, s_vec)
    return replace(base, **{n: round(float(v), 3) for n, v in zip(names, theta, strict=True)})


def allowed(w: Weights) -> bool:
    """What the ranking promises whatever the data: of two neighbouring messages, the one
    closer in meaning to the query ranks first, all else equal (LoCoMo alone would let the
    reply next to a match outrank the match, since its evidence is often that reply)."""
    return w.context <= _CONTEXT_SHARE * w.meaning


_CONTEXT_SHARE = 0.8  # a neighbour's meaning counts at most this much of a message's own


def project(w: Weights) -> Weights:
    """Weights that are :func:`allowed`, with the same sum of meaning and context."""
    if allowed(w):
        return w
    total = w.meaning + w.context
    meaning = round(total / (1 + _CONTEXT_SHARE), 3)
    return replace(w, meaning=meaning, context=round(_CONTEXT_SHARE * meaning, 3))


def search_r5(questions: list, names: tuple[str, ...], start: Weights, rounds: int = 3) -> Weights:
    """Coordinate search on R@5 (then R@10) around ``start``, among :func:`allowed`
    weights: the fits are smooth stand-ins, the benchmark counts ranks."""

    def objective(w: Weights) -> tuple[float, float]:
        r = recall_at(questions, w, (5, 10))
        return r[5], r[10]

    start = project(start)
    best, best_score = start, objective(start)
    for _ in range(rounds):
        improved = False
        for name in names:
            base = getattr(best, name)
            for factor in (0.0, 0.5, 0.75, 1.25, 1.5, 2.0):
                trial = replace(best, **{name: round(base * factor, 3)})
                if not allowed(trial):
                    continue
                score = objective(trial)
                if score > best_score:
                    best, best_score, improved = trial, score, True
        if not improved:
            break
    return best


def calibrate(questions: list, w: Weights, names: tuple[str, ...]) -> Weights:
    """Platt scaling: ``sigmoid(a * logit + b)`` fitted to the labels, folded into ``w``
    so that relevance is a calibrated chance again (the order does not change). Only the
    fitted weights are scaled; memory and history keep their set values."""
    s = np.concatenate([[logit(ev, w) for ev in evs] for _, _, evs in questions if evs])
    y = np.concatenate([labels for _, labels, evs in questions if evs])
    a, b = 1.0, 0.0
    for _ in range(200):
        p = 1 / (1 + np.exp(-(a * s + b)))
        g = np.array([((p - y) * s).mean(), (p - y).mean()])
        h = np.array([[(p * (1 - p) * s * s).mean(), (p * (1 - p) * s).mean()],
                      [(p * (1 - p) * s).mean(), (p * (1 - p)).mean()]]) + 1e-9 * np.eye(2)
        da, db = np.linalg.solve(h, g)
        a, b = a - da, b - db
        if max(abs(da), abs(db)) < 1e-10:
            break
    scaled = {n: round(float(getattr(w, n) * a), 3) for n in names}
    return replace(w, bias=round(float(w.bias * a + b), 3), **scaled)


def reliability(questions: list, w: Weights) -> list[tuple[str, int, float, int, float]]:
    """Per band of relevance: candidates and the share that are evidence; questions whose
    best hit is in the band and the share with an evidence turn in their top 5."""
    from hippobot.recall.ranking import relevance

    pairs = [(relevance(ev, w), y) for _, labels, evs in questions for ev, y in zip(evs, labels, strict=True)]
    bands = [(0.0, 0.05), (0.05, 0.1), (0.1, 0.2), (0.2, 0.3), (0.3, 0.5), (0.5, 0.7), (0.7, 1.01)]
    # Per question: the best hit's relevance, and whether an evidence turn is in the top 5.
    tops = []
    for _, labels, evs in questions:
        if not evs:
            continue
        scored = sorted(zip((relevance(ev, w) for ev in evs), labels, strict=True), key=lambda t: -t[0])
        tops.append((scored[0][0], any(y for _, y in scored[:5])))
    out = []
    for lo, hi in bands:
        ys = [y for p, y in pairs if lo <= p < hi]
        qs = [y for p, y in tops if lo <= p < hi]
        out.append((f"{lo:.2f}-{min(hi, 1):.2f}", len(ys), round(float(np.mean(ys)), 3) if ys else 0.0,
                    len(qs), round(float(np.mean(qs)), 3) if qs else 0.0))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.locomo.tune", description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--conversations", default="1-5", help="within 1-5 (default 1-5)")
    parser.add_argument("--embedder", choices=("local", "off"), default="local")
    parser.add_argument("--cache", type=Path, default=RESULTS / "locomo-cache")
    args = parser.parse_args(argv)
    try:
        convs = dataset.load(args.data)
        chosen = dataset.select(convs, args.conversations)
    except dataset.DatasetError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if any(convs.index(c) >= 5 for c in chosen):
        print("error: tune on conversations 1-5 only; 6-10 are held out", file=sys.stderr)
        return 2
    embedder, problem = make_embedder(args.embedder, args.cache, None)
    if problem:
        print(f"warning: {problem}; fitting keyword weights only", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="locomo-tune-") as work:
        data = collect(chosen, Path(work), embedder)
    for mode, base in (("keyword", KEYWORD), ("hybrid", HYBRID)):
        questions = data[mode]
        if not questions:
            continue
        fitted = fit(questions, _FITTED[mode], base)
        ranked = calibrate(questions, fit_listwise(questions, _FITTED[mode], fitted), _FITTED[mode])
        tuned = calibrate(questions, search_r5(questions, _FITTED[mode], ranked), _FITTED[mode])
        print(f"{mode}: {len(questions)} questions")
        print(f"  current {base}\n    R@k {recall_at(questions, base)}")
        print(f"  logistic fit {fitted}\n    R@k {recall_at(questions, fitted)}")
        print(f"  listwise fit, calibrated {ranked}\n    R@k {recall_at(questions, ranked)}")
        print(f"  R@5 search, calibrated {tuned}\n    R@k {recall_at(questions, tuned)}")
        for label, w in (("listwise fit", ranked), ("R@5 search", tuned)):
            print(f"  {label}: relevance band | candidates, share evidence | questions whose "
                  "best hit is in the band, share with evidence in the top 5")
            for band, n, share, nq, qshare in reliability(questions, w):
                print(f"    {band}: {n:>6} {share:.3f} | {nq:>4} {qshare:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
