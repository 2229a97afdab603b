"""BK (Zhang et al. 2024): LM background knowledge as potential-based reward shaping.

Three potentials, each built offline from a collected episode dataset (:mod:`llmguide.data`):

- **BK-Code** (:func:`write_potential_code`, :class:`CodePotential`): the LM writes
  ``def potential(obs, caption) -> float`` in a write / run / fix / improve loop; the code only
  ever runs in :class:`llmguide.sandbox.Sandbox`.  A failing program gives Φ = 0, logged.
- **BK-Pref** (:func:`label_preferences`, :func:`fit_preference_model`, :class:`PreferencePotential`):
  the LM ranks pairs of segments (``A > B | B > A | A = B``); a Bradley-Terry model
  ``score(segment) = sum_t phi(s_t)`` is fitted and ``Φ(s) = phi(s)`` (standardised on the data).
- **BK-Goal** (:func:`build_goal_library`, :class:`GoalPotential`): the LM grows a goal list from
  captioned windows; ``Φ(s') = max cos(e(transition text), e(goal))`` over the goals retrieved for
  the caption of ``s'``, when above a threshold calibrated on the dataset (else 0).

Shaping is :func:`llmguide.rewards.shaping.potential_shaping`, ``F = γ(1−done)Φ(s') − Φ(s)``.
Code and goal potentials read the *transition* that reached a state (caption, events, action),
so :class:`TransitionPotentialShaping` evaluates Φ once per row on ``next_obs``/``infos`` and takes
``Φ(s_t)`` from the previous row (carried across rollouts); a first state of an episode has no
incoming transition and gets Φ = 0, which keeps the telescoping sum (and policy invariance) intact.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from llmguide.core.rundir import atomic_torch_save, atomic_write_text
from llmguide.data import Episode
from llmguide.llm.base import LanguageModel
from llmguide.llm.parsing import ParseStats, parse_bullets, parse_preference
from llmguide.llm.prompts import load_template
from llmguide.rewards.base import TransitionBatch
from llmguide.rewards.shaping import PotentialShaping, potential_shaping
from llmguide.sandbox import Sandbox

log = logging.getLogger(__name__)

ZERO_PROGRAM = "def potential(obs, caption):\n    return 0.0\n"
PREF_LABEL = {"B": 1.0, "A": 0.0, "=": 0.5}          # P(B preferred); unparseable -> -1 (dropped)


# --- text of states, transitions and windows ----------------------------------------------
def action_name(action: int, action_names: Sequence[str] | None) -> str:
    if action_names and 0 <= int(action) < len(action_names):
        return str(action_names[int(action)])
    return f"action {int(action)}"


def transition_text(caption: str, events: Sequence[str], action: str) -> str:
    """Caption of one transition: what happened (events) else the action, then what is seen now."""
    happened = ", ".join(str(e) for e in events) if events else f"you {action}"
    return f"{happened}. {caption}".strip()


def window_text(captions: Sequence[str], actions: Sequence[int], action_names: Sequence[str] | None) -> str:
    """BK's window caption: ``Step i: <caption>. You choose the action: <a>.`` ... ``Current observation: ...``."""
    lines = [f"Step {i + 1}: {captions[i]}. You choose the action: {action_name(a, action_names)}."
             for i, a in enumerate(actions)]
    return "\n".join([*lines, f"Current observation: {captions[len(actions)]}."])


def flat_features(obs: dict[str, np.ndarray], batch_dims: int = 1) -> np.ndarray:
    """Concatenate every observation key flattened after the ``batch_dims`` leading dims (float32)."""
    parts = []
    for key in sorted(obs):
        value = np.asarray(obs[key], dtype=np.float32)
        parts.append(value.reshape(*value.shape[:batch_dims], -1))
    return np.concatenate(parts, axis=-1)


# --- shaping over transition-based potentials ------------------------------------------------
TransitionPotential = Callable[[dict[str, np.ndarray], list[dict], np.ndarray], np.ndarray]


class TransitionPotentialShaping(PotentialShaping):
    """PBRS for a potential of the state *reached by a transition* (needs its caption / events).

    ``potential(next_obs_rows, info_rows, action_rows) -> (B,)``.  Call :meth:`compute` once per
    rollout (as PPO does): the last row's Φ is carried into the next rollout.
    """

    def __init__(self, potential: TransitionPotential, gamma: float, name: str = "bk", scale: float = 1.0):
        super().__init__(potential, gamma)
        self.name = name
        self.scale = float(scale)
        self._carry: np.ndarray | None = None
        self.last_stats: dict[str, float] = {}

    def compute(self, batch: TransitionBatch) -> np.ndarray:
        rewards = np.asarray(batch.rewards)
        T, N = rewards.shape
        dones = np.asarray(batch.dones, dtype=bool)
        rows = {k: np.asarray(v).reshape(T * N, *np.asarray(v).shape[2:]) for k, v in batch.next_obs.items()}
        infos = [batch.infos[t][n] if batch.infos else {} for t in range(T) for n in range(N)]
        phi_flat = np.asarray(self.potential(rows, infos, np.asarray(batch.actions).reshape(-1)), dtype=np.float64)
        if phi_flat.shape != (T * N,):
            raise ValueError(f"potential returned shape {phi_flat.shape}, expected {(T * N,)}")
        phi_next = np.nan_to_num(phi_flat, nan=0.0, posinf=0.0, neginf=0.0).reshape(T, N) * self.scale
        carry = self._carry if self._carry is not None and self._carry.shape == (N,) else np.zeros(N)
        phi_s = np.empty_like(phi_next)
        phi_s[0] = carry
        phi_s[1:] = np.where(dones[:-1], 0.0, phi_next[:-1])
        self._carry = np.where(dones[-1], 0.0, phi_next[-1])
        self.last_stats = {"phi_mean": float(phi_next.mean()), "phi_nonzero": float((phi_next != 0).mean())}
        return potential_shaping(phi_s, phi_next, batch.terminated, self.gamma)

    def update(self, batch: TransitionBatch) -> dict[str, float]:
        extra = getattr(self.potential, "metrics", None)
        return {**self.last_stats, **(extra() if callable(extra) else {})}

    def state_dict(self) -> dict[str, Any]:
        return {"carry": None if self._carry is None else self._carry.tolist()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        carry = state.get("carry")
        self._carry = None if carry is None else np.asarray(carry, dtype=np.float64)


# --- BK-Code ------------------------------------------------------------------------------------
_CODE_BLOCK = re.compile(r"```(?:python|py)?[ \t]*\n(.*?)(?:```|$)", re.DOTALL | re.IGNORECASE)


def extract_code(text: str, function: str = "potential") -> str | None:
    """The first fenced code block defining ``function`` (or the text from ``def function``), else None."""
    for block in _CODE_BLOCK.findall(text or ""):
        if f"def {function}" in block:
            return block.strip() + "\n"
    start = (text or "").find(f"def {function}")
    if start < 0:
        return None
    head = text[:start]
    imports = [ln for ln in head.splitlines() if re.match(r"^(import|from)\s+\w", ln)]
    return "\n".join([*imports, text[start:].split("```")[0].rstrip()]) + "\n"


def describe_obs(obs: dict[str, np.ndarray]) -> str:
    """One line per observation key: name, shape, dtype and value range (shown to the LM)."""
    return "\n".join(f"- obs[{k!r}]: numpy array, shape {tuple(v.shape)}, dtype {v.dtype}, "
                     f"values in [{float(np.min(v)):.3g}, {float(np.max(v)):.3g}]" for k, v in sorted(obs.items()))


@dataclass
class CodeResult:
    """Outcome of the BK-Code loop: the program used for Φ and what happened on the way."""

    code: str
    ok: bool
    lm_calls: int = 0
    steps: list[dict[str, Any]] = field(default_factory=list)


def sample_states(episodes: Sequence[Episode], n: int, rng: np.random.Generator) -> list[tuple[dict, str]]:
    """``n`` random ``(obs, caption)`` states from the dataset (the arguments of ``potential``)."""
    out = []
    for _ in range(n):
        ep = episodes[int(rng.integers(len(episodes)))]
        t = int(rng.integers(len(ep) + 1))
        out.append(({k: v[t] for k, v in ep.obs.items()}, ep.captions[t]))
    return out


def write_potential_code(lm: LanguageModel, states: Sequence[tuple[dict, str]], sandbox: Sandbox,
                         out_dir: str | Path, env_notes: str = "", iterations: int = 3, fix_retries: int = 2,
                         max_tokens: int = 512, temperature: float = 0.5, seed: int = 0) -> CodeResult:
    """BK-Code's loop: write → run on ``states`` in the sandbox → fix (with the error) → improve.

    Ends after ``iterations × (1 + fix_retries)`` LM calls at most.  Every step (answer, code,
    error, values) goes to ``out_dir/steps.jsonl`` and ``code-<i>-<j>.py``; the last program that
    ran cleanly is ``final.py`` — or, if none did, :data:`ZERO_PROGRAM` (Φ = 0) with ``ok=False``.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_t, fix_t, improve_t = (load_template(n) for n in ("bk_code_write", "bk_code_fix", "bk_code_improve"))
    obs_text = describe_obs(states[0][0]) if states else "(no states)"
    examples = "\n".join(f"- {c!r}" for _, c in list(states)[:3])
    prompt = write_t.render(obs_description=obs_text, caption_examples=examples, env_notes=env_notes)
    version = write_t.version
    result = CodeResult(code=ZERO_PROGRAM, ok=False)
    log_file = open(out / "steps.jsonl", "a", encoding="utf-8")  # noqa: SIM115
    try:
        for it in range(iterations):
            for attempt in range(1 + fix_retries):
                completion = lm.generate([prompt], max_tokens=max_tokens, temperature=temperature,
                                         seed=seed + result.lm_calls)[0]
                result.lm_calls += 1
                code = extract_code(completion.text)
                values: list[float] = []
                if completion.error:
                    error = f"LM call failed: {completion.error}"
                elif code is None:
                    error = "the answer holds no ```python block defining `def potential(obs, caption)`"
                else:
                    res = sandbox.evaluate(code, "potential", list(states))
                    error = res.error if not res.ok else None
                    values = [round(float(v), 4) for v in res.values]
                    if res.ok and res.item_errors:
                        error = f"{res.item_errors} of {len(states)} states raised:\n{res.first_item_error}"
                    (out / f"code-{it}-{attempt}.py").write_text(code)
                step = {"iteration": it, "attempt": attempt, "prompt_version": version, "answer": completion.text,
                        "code": code, "ok": error is None, "error": error, "values": values}
                result.steps.append(step)
                log_file.write(json.dumps(step) + "\n")
                log_file.flush()
                if error is None:
                    result.code, result.ok = code, True
                    samples = "\n".join(f"- caption {c!r} -> {v}" for (_, c), v in zip(states, values, strict=False))
                    prompt = improve_t.render(code=code, samples=samples)
                    version = improve_t.version
                    break
                log.warning("BK-Code iteration %d attempt %d failed: %s", it, attempt, error.splitlines()[0])
                prompt = fix_t.render(code=code or completion.text[:1500], error=error[-1500:],
                                      obs_description=obs_text)
                version = fix_t.version
            else:  # every attempt of this iteration failed: start over from the write prompt
                prompt = write_t.render(obs_description=obs_text, caption_examples=examples, env_notes=env_notes)
                version = write_t.version
    finally:
        log_file.close()
    if not result.ok:
        log.warning("BK-Code: no program ran cleanly in %d LM calls; using Φ = 0 (errors in %s)",
                    result.lm_calls, out / "steps.jsonl")
    atomic_write_text(out / "final.py", result.code)
    atomic_write_text(out / "summary.json", json.dumps(
        {"ok": result.ok, "lm_calls": result.lm_calls, "steps": len(result.steps),
         "failed_steps": sum(not s["ok"] for s in result.steps), "prompt_versions":
         sorted({s["prompt_version"] for s in result.steps})}, indent=2))
    return result


class CodePotential:
    """Φ from an LM-written ``potential(obs, caption)``, evaluated in the sandbox, one call per batch."""

    def __init__(self, code: str, sandbox: Sandbox | None = None, clip: float = 10.0,
                 error_log: str | Path | None = None):
        self.code = code
        self.sandbox = sandbox or Sandbox()
        self.clip = float(clip)
        self.error_log = Path(error_log) if error_log else None
        self.calls = self.failed_calls = self.item_errors = 0

    def __call__(self, obs: dict[str, np.ndarray], infos: list[dict], actions: np.ndarray) -> np.ndarray:
        n = len(actions)
        items = [({k: v[i] for k, v in obs.items()}, str(infos[i].get("caption", "")) if i < len(infos) else "")
                 for i in range(n)]
        res = self.sandbox.evaluate(self.code, "potential", items)
        self.calls += 1
        self.item_errors += res.item_errors
        if not res.ok or res.item_errors:
            self.failed_calls += int(not res.ok)
            self._record(res.error or res.first_item_error or "")
        return np.clip(res.values, -self.clip, self.clip)

    def _record(self, error: str) -> None:
        if self.error_log is not None:
            self.error_log.parent.mkdir(parents=True, exist_ok=True)
            with open(self.error_log, "a", encoding="utf-8") as f:
                f.write(json.dumps({"call": self.calls, "error": error[-3000:]}) + "\n")

    def metrics(self) -> dict[str, float]:
        return {"sandbox_calls": self.calls, "sandbox_failed_calls": self.failed_calls,
                "sandbox_item_errors": self.item_errors}


# --- BK-Pref ------------------------------------------------------------------------------------
@dataclass
class Segment:
    """``length`` transitions of episode ``episode`` starting at state ``start``."""

    episode: int
    start: int
    length: int

    def as_list(self) -> list[int]:
        return [self.episode, self.start, self.length]


def sample_segment(episodes: Sequence[Episode], length: int, rng: np.random.Generator) -> Segment:
    i = int(rng.integers(len(episodes)))
    n = len(episodes[i])
    h = min(length, n)
    return Segment(i, int(rng.integers(n - h + 1)), h)


def segment_text(ep: Episode, seg: Segment, action_names: Sequence[str] | None) -> str:
    s, e = seg.start, seg.start + seg.length
    return window_text(ep.captions[s:e + 1], [int(a) for a in ep.actions[s:e]], action_names)


def label_preferences(lm: LanguageModel, episodes: Sequence[Episode], num_pairs: int, out_dir: str | Path,
                      segment_length: int = 5, action_names: Sequence[str] | None = None, batch_size: int = 8,
                      max_tokens: int = 96, temperature: float = 0.5, seed: int = 0) -> dict[str, Any]:
    """Ask the LM to rank ``num_pairs`` random segment pairs; labels and raw answers → ``labels.jsonl``.

    Label = P(B preferred): ``B > A`` → 1, ``A > B`` → 0, ``A = B`` → 0.5; an LM failure or an
    unparseable answer → -1 (kept in the file, dropped when fitting) and counted.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    template = load_template("bk_pref")
    rng = np.random.default_rng(seed)
    stats = ParseStats()
    counts = {"A": 0, "B": 0, "=": 0, "unparsed": 0, "lm_error": 0}
    with open(out / "labels.jsonl", "w", encoding="utf-8") as f:
        for start in range(0, num_pairs, batch_size):
            pairs = [(sample_segment(episodes, segment_length, rng), sample_segment(episodes, segment_length, rng))
                     for _ in range(min(batch_size, num_pairs - start))]
            prompts = [template.render(a=segment_text(episodes[a.episode], a, action_names),
                                       b=segment_text(episodes[b.episode], b, action_names)) for a, b in pairs]
            completions = lm.generate(prompts, max_tokens=max_tokens, temperature=temperature, seed=seed + start)
            for k, ((a, b), comp) in enumerate(zip(pairs, completions, strict=True)):
                choice = None if comp.error else parse_preference(comp.text, stats)
                if comp.error:
                    counts["lm_error"] += 1
                elif choice is None:
                    counts["unparsed"] += 1
                else:
                    counts[choice] += 1
                record = {"pair": start + k, "a": a.as_list(), "b": b.as_list(), "answer": comp.text,
                          "choice": choice, "label": PREF_LABEL.get(choice or "", -1.0), "error": comp.error,
                          "prompt_version": template.version}
                f.write(json.dumps(record) + "\n")
            f.flush()
    summary = {"pairs": num_pairs, **counts, "usable": num_pairs - counts["unparsed"] - counts["lm_error"],
               "prompt_version": template.version, **stats.as_dict()}
    atomic_write_text(out / "label_summary.json", json.dumps(summary, indent=2))
    if summary["usable"] == 0:
        log.warning("BK-Pref: none of %d LM answers gave a usable label (see %s)", num_pairs, out / "labels.jsonl")
    return summary


def read_labels(path: str | Path) -> list[dict[str, Any]]:
    return [json.loads(ln) for ln in Path(path).read_text().splitlines() if ln.strip()]


class PreferenceNet(nn.Module):
    """``phi(s)``: an MLP on the flattened observation; segment score = sum of phi over its states."""

    def __init__(self, in_dim: int, hidden: int = 128):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(in_dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                                  nn.Linear(hidden, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x).squeeze(-1)


def _segment_states(ep: Episode, seg: Segment) -> np.ndarray:
    """Features of the states a segment reaches, s_{start+1} .. s_{start+length}."""
    obs = {k: v[seg.start + 1: seg.start + seg.length + 1] for k, v in ep.obs.items()}
    return flat_features(obs)


def fit_preference_model(episodes: Sequence[Episode], labels: Sequence[dict[str, Any]], out_path: str | Path,
                         epochs: int = 20, lr: float = 3e-4, batch_size: int = 32, hidden: int = 128,
                         holdout: float = 0.1, include_ties: bool = True, seed: int = 0) -> dict[str, Any]:
    """Bradley-Terry fit: ``P(B > A) = sigmoid(score_B − score_A)``; keeps the best held-out epoch.

    Ties are soft targets 0.5 (``include_ties``) or dropped; label -1 is always dropped.  The saved
    model standardises phi with its mean/std over every dataset state.  With no usable label the
    model file says so and :class:`PreferencePotential` gives Φ = 0.
    """
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    usable = [r for r in labels if r["label"] >= 0 and (include_ties or r["label"] != 0.5)]
    in_dim = flat_features({k: v[:1] for k, v in episodes[0].obs.items()}).shape[-1]
    net = PreferenceNet(in_dim, hidden)
    sample_ndims = {k: int(v.ndim - 1) for k, v in episodes[0].obs.items()}
    info: dict[str, Any] = {"labels": len(labels), "usable": len(usable), "in_dim": in_dim, "hidden": hidden,
                            "sample_ndims": sample_ndims}
    if not usable:
        log.warning("BK-Pref: no usable preference labels; the potential is Φ = 0")
        atomic_torch_save({"usable": 0, "in_dim": in_dim, "hidden": hidden, "state": net.state_dict(),
                           "mean": 0.0, "std": 1.0, "info": info}, out_path)
        return info
    H = max(max(r["a"][2], r["b"][2]) for r in usable)

    def padded(key: str) -> tuple[torch.Tensor, torch.Tensor]:
        feats = torch.zeros(len(usable), H, in_dim)
        mask = torch.zeros(len(usable), H)
        for j, r in enumerate(usable):
            x = _segment_states(episodes[r[key][0]], Segment(*r[key]))
            feats[j, : len(x)] = torch.from_numpy(x)
            mask[j, : len(x)] = 1.0
        return feats, mask

    (xa, ma), (xb, mb) = padded("a"), padded("b")
    target = torch.tensor([r["label"] for r in usable], dtype=torch.float32)
    order = rng.permutation(len(usable))
    n_hold = int(round(holdout * len(usable))) if len(usable) >= 10 else 0
    hold, train = order[:n_hold], order[n_hold:]
    opt = torch.optim.AdamW(net.parameters(), lr=lr)

    def scores(idx: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """Segment scores sum_t phi(s_t) (padding masked) for the pairs ``idx``."""
        return (net(xa[idx]) * ma[idx]).sum(-1), (net(xb[idx]) * mb[idx]).sum(-1)

    def accuracy(idx: np.ndarray) -> float:
        strict = np.asarray([i for i in idx if float(target[i]) != 0.5], dtype=np.int64)
        if len(strict) == 0:
            return float("nan")
        with torch.no_grad():
            sa, sb = scores(strict)
        return float(((sb > sa).float() == target[strict]).float().mean())

    best, best_state, history = -1.0, None, []
    for epoch in range(epochs):
        rng.shuffle(train)
        for start in range(0, len(train), batch_size):
            idx = train[start:start + batch_size]
            sa, sb = scores(idx)
            loss = nn.functional.binary_cross_entropy_with_logits(sb - sa, target[idx])
            opt.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(net.parameters(), 1.0)
            opt.step()
        acc = accuracy(hold if len(hold) else train)
        history.append({"epoch": epoch, "loss": float(loss.detach()), "accuracy": acc})
        if best_state is None or (np.isfinite(acc) and acc > best):
            best, best_state = (acc if np.isfinite(acc) else best), {k: v.clone() for k, v in net.state_dict().items()}
    net.load_state_dict(best_state)
    with torch.no_grad():
        all_phi = torch.cat([net(torch.from_numpy(flat_features(ep.obs))) for ep in episodes])
    mean, std = float(all_phi.mean()), float(all_phi.std()) if len(all_phi) > 1 else 1.0
    info.update({"train_accuracy": accuracy(train), "holdout_accuracy": accuracy(hold) if len(hold) else None,
                 "holdout": int(len(hold)), "phi_mean": mean, "phi_std": std, "history": history})
    atomic_torch_save({"usable": len(usable), "in_dim": in_dim, "hidden": hidden, "state": net.state_dict(),
                       "mean": mean, "std": max(std, 1e-6), "info": info}, out_path)
    return info


class PreferencePotential:
    """``Φ(obs) = (phi(obs) − mean) / std`` over ``(..., obs)`` batches; Φ = 0 if no label was usable."""

    def __init__(self, path: str | Path):
        data = torch.load(path, map_location="cpu", weights_only=False)
        self.usable = int(data["usable"])
        self.net = PreferenceNet(int(data["in_dim"]), int(data["hidden"]))
        self.net.load_state_dict(data["state"])
        self.net.eval()
        self.mean, self.std = float(data["mean"]), float(data["std"])
        self.in_dim = int(data["in_dim"])
        self.sample_ndims: dict[str, int] = dict(data["info"]["sample_ndims"])

    @torch.no_grad()
    def __call__(self, obs: dict[str, np.ndarray]) -> np.ndarray:
        key = next(iter(self.sample_ndims))
        lead = np.asarray(obs[key]).ndim - self.sample_ndims[key]
        feats = flat_features(obs, batch_dims=lead)
        if self.usable == 0:
            return np.zeros(feats.shape[:-1])
        if feats.shape[-1] != self.in_dim:
            raise ValueError(f"preference model expects {self.in_dim} observation features, got {feats.shape[-1]} "
                             "(was it fitted on another env?)")
        phi = self.net(torch.from_numpy(feats.reshape(-1, self.in_dim))).numpy().reshape(feats.shape[:-1])
        return (phi - self.mean) / self.std


# --- BK-Goal ------------------------------------------------------------------------------------
def _normalize_goal(goal: str) -> str:
    return re.sub(r"\s+", " ", goal.strip().strip(".").lower())


def build_goal_library(lm: LanguageModel, episodes: Sequence[Episode], out_dir: str | Path, iterations: int = 20,
                       window: int = 3, max_goals: int = 30, action_names: Sequence[str] | None = None,
                       max_tokens: int = 128, temperature: float = 0.5, seed: int = 0) -> dict[str, Any]:
    """Grow a goal list: each iteration shows one captioned window and the current list and asks for
    an improved markdown list.  Each window caption (a retrieval key) maps to the goals answered for it.

    Saves ``answers.jsonl`` (raw answers) and ``library.json`` (goals, keys, key → goal ids).
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    template = load_template("bk_goal")
    rng = np.random.default_rng(seed)
    stats = ParseStats()
    goals: list[str] = []
    keys: list[str] = []
    key_goals: list[list[int]] = []
    failures = 0
    with open(out / "answers.jsonl", "w", encoding="utf-8") as f:
        for it in range(iterations):
            seg = sample_segment(episodes, window, rng)
            ep = episodes[seg.episode]
            text = segment_text(ep, seg, action_names)
            current = "\n".join(f"- {g}" for g in goals) or "(empty)"
            comp = lm.generate([template.render(window=text, goals=current)], max_tokens=max_tokens,
                               temperature=temperature, seed=seed + it)[0]
            parsed = [] if comp.error else [_normalize_goal(g) for g in parse_bullets(comp.text, stats)]
            parsed = [g for g in dict.fromkeys(parsed) if 2 <= len(g) <= 120]
            if not parsed:
                failures += 1
            ids = []
            for g in parsed:
                if g not in goals and len(goals) < max_goals:
                    goals.append(g)
                if g in goals:
                    ids.append(goals.index(g))
            if ids:
                keys.append(ep.captions[seg.start + seg.length])
                key_goals.append(ids)
            f.write(json.dumps({"iteration": it, "window": text, "answer": comp.text, "error": comp.error,
                                "goals": parsed, "prompt_version": template.version}) + "\n")
    library = {"goals": goals, "keys": keys, "key_goals": key_goals, "iterations": iterations,
               "failed_answers": failures, "prompt_version": template.version, **stats.as_dict()}
    atomic_write_text(out / "library.json", json.dumps(library, indent=2))
    if not goals:
        log.warning("BK-Goal: the LM produced no goal in %d iterations; Φ = 0 (see %s)", iterations,
                    out / "answers.jsonl")
    return library


class GoalPotential:
    """``Φ(s') = max cos(e(transition text), e(g))`` over goals retrieved for caption(s'), if ≥ threshold."""

    def __init__(self, library: dict[str, Any], embedder: Any, action_names: Sequence[str] | None = None,
                 top_k: int = 3, threshold: float | None = None):
        self.goals = list(library.get("goals", []))
        self.keys = list(library.get("keys", []))
        self.key_goals = [list(ids) for ids in library.get("key_goals", [])]
        self.embedder = embedder
        self.action_names = action_names
        self.top_k = int(top_k)
        self.threshold = float(threshold if threshold is not None else library.get("threshold", 0.5))
        self.goal_emb = embedder.embed(self.goals) if self.goals else np.zeros((0, 1), np.float32)
        self.key_emb = embedder.embed(self.keys) if self.keys else np.zeros((0, 1), np.float32)

    def similarities(self, captions: Sequence[str], texts: Sequence[str]) -> np.ndarray:
        """Max cosine of each text to the goals retrieved for its caption (all goals without keys)."""
        if not self.goals:
            return np.zeros(len(texts))
        sims = np.asarray(self.embedder.embed(list(texts))) @ self.goal_emb.T        # (B, G)
        if self.keys:
            near = np.argsort(-(np.asarray(self.embedder.embed(list(captions))) @ self.key_emb.T), axis=1)
            mask = np.zeros_like(sims, dtype=bool)
            for b, row in enumerate(near[:, : self.top_k]):
                for k in row:
                    mask[b, self.key_goals[k]] = True
            sims = np.where(mask, sims, -1.0)
        return sims.max(axis=1)

    def __call__(self, obs: dict[str, np.ndarray], infos: list[dict], actions: np.ndarray) -> np.ndarray:
        captions = [str(i.get("caption", "")) for i in infos]
        texts = [transition_text(c, i.get("events") or [], action_name(a, self.action_names))
                 for c, i, a in zip(captions, infos, actions, strict=True)]
        sims = self.similarities(captions, texts)
        return np.where(sims >= self.threshold, sims, 0.0)


def dataset_transition_texts(episodes: Sequence[Episode], action_names: Sequence[str] | None,
                             limit: int, rng: np.random.Generator) -> tuple[list[str], list[str]]:
    """(captions of reached states, transition texts) for up to ``limit`` random dataset transitions."""
    pairs = [(i, t) for i, ep in enumerate(episodes) for t in range(len(ep))]
    if len(pairs) > limit:
        pairs = [pairs[j] for j in rng.choice(len(pairs), limit, replace=False)]
    captions = [episodes[i].captions[t + 1] for i, t in pairs]
    texts = [transition_text(episodes[i].captions[t + 1], episodes[i].events[t],
                             action_name(int(episodes[i].actions[t]), action_names)) for i, t in pairs]
    return captions, texts


def calibrate_threshold(potential: GoalPotential, captions: Sequence[str], texts: Sequence[str],
                        fire_rate: float = 0.1, floor: float = 0.3) -> dict[str, float]:
    """Threshold = the (1 − fire_rate) quantile of dataset similarities (at least ``floor``)."""
    sims = potential.similarities(captions, texts) if texts else np.zeros(0)
    if len(sims) == 0 or not potential.goals:
        return {"threshold": 1.01, "fire_rate": 0.0, "samples": int(len(sims))}
    threshold = max(float(np.quantile(sims, 1.0 - fire_rate)), floor)
    return {"threshold": threshold, "fire_rate": float((sims >= threshold).mean()), "samples": int(len(sims)),
            "sim_mean": float(sims.mean()), "sim_max": float(sims.max())}
