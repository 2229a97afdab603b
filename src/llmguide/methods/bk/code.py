"""BK-Code: the LM writes ``def potential(obs, caption) -> float`` in a write / run / fix / improve
loop (:func:`write_potential_code`); the code only ever runs in :class:`llmguide.sandbox.Sandbox`
(:class:`CodePotential`, one sandbox call per rollout).

A program is *valid* when it runs cleanly on every sampled dataset state, returns finite numbers and
is not constant over them (a constant Φ shapes nothing); anything else goes back to the LM with the
error.  The prompt's ``env_notes`` carry a function skeleton and a few-shot example
(:data:`BABYAI_NOTES`, :data:`BABYAI_EXAMPLE`), which a small embedded model needs to write a program that runs
at all; ``method.code.example`` swaps the example for one from another game (``offdomain``) or drops it
(``none``), so that what the LM writes can be told from what the example shows.
If no program is valid the loop returns ``ok=False`` and the label step fails (no Φ ≡ 0 stand-in).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from llmguide.core.errors import LLMUnavailableError
from llmguide.core.rundir import atomic_write_text
from llmguide.data import Episode
from llmguide.llm.base import LanguageModel
from llmguide.methods.bk.prompts import template as bk_template
from llmguide.sandbox import Sandbox

log = logging.getLogger(__name__)

ZERO_PROGRAM = "def potential(obs, caption):\n    return 0.0\n"
BATCH_FUNCTION = "potential_batch"     # optional vectorised form: potential_batch(obs_batch, captions) -> (B,)
IMPORT_HEADER = "import math\nimport re\n\nimport numpy as np\n\n"   # as the reference's fixed header


def with_import_header(code: str) -> str:
    """Prepend the allowed imports when the program lacks them (small models drop the import line)."""
    return code if "import numpy as np" in code else IMPORT_HEADER + code

BABYAI_NOTES = """Notes on obs for this game (BabyAI): obs['image'][c, row, col] is one-hot over channels:
0-10 object type (0 unseen, 1 empty, 2 wall, 3 floor, 4 door, 5 key, 6 ball, 7 box, 8 goal, 9 lava, 10 agent),
11-16 colour (red, green, blue, purple, yellow, grey), 17-19 door state (open, closed, locked).
The agent is at row 6, column 3, facing up: the cell in front is row 5, column 3.
obs['vector'][:4] is the facing direction (one-hot).

Complete this skeleton (keep the signature; return a float):
```python
import numpy as np

def potential(obs, caption):
    image = np.asarray(obs["image"])      # shape (20, 7, 7)
    score = 0.0
    # ... your idea of progress here ...
    return float(score)
```
"""

BABYAI_EXAMPLE = """
Example of a valid program (a different idea: prefer seeing many objects):
```python
import numpy as np

def potential(obs, caption):
    image = np.asarray(obs["image"])
    objects = image[5] + image[6] + image[7]          # keys, balls, boxes per cell
    return float(objects.sum()) / 10.0
```
"""

CRAFTER_NOTES = """Notes on obs for this game (Crafter): obs['image'][c, row, col] is one-hot over 19 channels
(what is on each tile of the 7x9 view): 0 unknown, 1 water, 2 grass, 3 stone, 4 path, 5 sand, 6 tree,
7 lava, 8 coal, 9 iron, 10 diamond, 11 table, 12 furnace, 13 player, 14 cow, 15 zombie, 16 skeleton,
17 arrow, 18 plant. The player is at row 3, column 4.
obs['vector'][:16] * 9 is the inventory count of: health, food, drink, energy, sapling, wood, stone,
coal, iron, diamond, wood_pickaxe, stone_pickaxe, iron_pickaxe, wood_sword, stone_sword, iron_sword;
obs['vector'][16:20] the facing direction (one-hot), [20] sleeping, [21] daylight.

Complete this skeleton (keep the signature; return a float):
```python
import numpy as np

def potential(obs, caption):
    image = np.asarray(obs["image"])      # shape (19, 7, 9)
    inventory = np.rint(np.asarray(obs["vector"])[:16] * 9)
    score = 0.0
    # ... your idea of progress here ...
    return float(score)
```
"""

CRAFTER_EXAMPLE = """
Example of a valid program (a different idea: prefer full vitals and water in view):
```python
import numpy as np

def potential(obs, caption):
    image = np.asarray(obs["image"])
    vitals = np.asarray(obs["vector"])[:4]             # health, food, drink, energy (/9)
    return float(vitals.mean()) + 0.1 * float(image[1].sum() > 0)
```
"""

# the off-domain example: the same format (imports, signature, a float from obs arrays) for another game, a racing
# game whose observation keys no env here has, so it teaches how to write a program and nothing of the env
OFFDOMAIN_EXAMPLE = """
Example of a valid program for another game (a racing game whose obs has 'track' and 'speed'; not this game):
```python
import numpy as np

def potential(obs, caption):
    track = np.asarray(obs["track"])                  # 1 on the road ahead, 0 off it
    speed = float(np.asarray(obs["speed"])[0])
    return 0.5 * float(track[0].mean()) + 0.01 * speed
```
"""

NOTES = {"babyai": (BABYAI_NOTES, BABYAI_EXAMPLE), "crafter": (CRAFTER_NOTES, CRAFTER_EXAMPLE),
         "craftax": (CRAFTER_NOTES, CRAFTER_EXAMPLE)}
EXAMPLES = ("env", "offdomain", "none")   # method.code.example: the notes' example program


def env_notes(env_name: str, example: str = "env") -> str:
    """The obs notes and skeleton shown to the LM for an env family ("" if none), then the example program:
    ``env`` one for this env (few-shot), ``offdomain`` one for another game (the format only), ``none`` no
    example (zero-shot)."""
    if example not in EXAMPLES:
        raise ValueError(f"example must be one of {EXAMPLES}, got {example!r}")
    notes, own = NOTES.get(str(env_name), ("", ""))
    if not notes:
        return ""
    return notes + {"env": own, "offdomain": OFFDOMAIN_EXAMPLE, "none": ""}[example]


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
    summary: dict[str, Any] = field(default_factory=dict)


def sample_states(episodes: Sequence[Episode], n: int, rng: np.random.Generator) -> list[tuple[dict, str]]:
    """``n`` random ``(obs, caption)`` states from the dataset (the arguments of ``potential``)."""
    out = []
    for _ in range(n):
        ep = episodes[int(rng.integers(len(episodes)))]
        t = int(rng.integers(len(ep) + 1))
        out.append(({k: v[t] for k, v in ep.obs.items()}, ep.captions[t]))
    return out


PROMPT_SAMPLES = 16   # states shown with their values in the improve prompt (all sampled states are checked)


def write_potential_code(lm: LanguageModel, states: Sequence[tuple[dict, str]], sandbox: Sandbox,
                         out_dir: str | Path, env_notes: str = "", iterations: int = 3, fix_retries: int = 2,
                         max_tokens: int = 512, temperature: float = 0.5, seed: int = 0,
                         mission: str | None = None) -> CodeResult:
    """BK-Code's loop: write → run on ``states`` in the sandbox → fix (with the error) → improve.

    Ends after ``iterations × (1 + fix_retries)`` LM calls at most.  Every step (answer, code,
    error, values) goes to ``out_dir/steps.jsonl`` and ``code-<i>-<j>.py``; the last program that
    valid is ``final.py``; if none was, ``ok=False`` (``code`` is :data:`ZERO_PROGRAM`, never used).
    ``mission``: the agent's task, told in the write prompt (``bk_code_write_task``); None: the paper's
    task-agnostic prompt (``bk_code_write``).
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_t, fix_t, improve_t = (bk_template(n) for n in ("bk_code_write_task" if mission else "bk_code_write",
                                                               "bk_code_fix", "bk_code_improve"))
    told = {"mission": mission} if mission else {}
    obs_text = describe_obs(states[0][0]) if states else "(no states)"
    examples = "\n".join(f"- {c!r}" for _, c in list(states)[:3])
    prompt = write_t.render(obs_description=obs_text, caption_examples=examples, env_notes=env_notes, **told)
    version = write_t.version
    result = CodeResult(code=ZERO_PROGRAM, ok=False)
    log_file = open(out / "steps.jsonl", "a", encoding="utf-8")  # noqa: SIM115
    unanswered = False   # the LM cannot answer a later prompt (llm=prompt_only: the improve prompt)
    try:
        for it in range(iterations):
            if unanswered:
                break
            for attempt in range(1 + fix_retries):
                try:
                    completion = lm.generate([prompt], max_tokens=max_tokens, temperature=temperature,
                                             seed=seed + result.lm_calls)[0]
                except LLMUnavailableError as err:   # e.g. llm=random: no counterfactual program
                    if result.lm_calls:   # llm=prompt_only: a fix or improve prompt tells no answer; the loop ends
                        log.info("BK-Code: %s; the loop ends with %s", err,
                                 "its valid program" if result.ok else "no valid program")
                        unanswered = True
                        break
                    raise LLMUnavailableError(f"{err}; BK's is method=bk_random_phi") from err
                result.lm_calls += 1
                code = extract_code(completion.text)
                code = with_import_header(code) if code else None
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
                    elif res.ok and len(states) > 1 and len(set(values)) == 1:
                        error = (f"the function returned the same value {values[0]} for all {len(states)} states; "
                                 "a constant potential is useless: make it depend on obs (see the example)")
                    elif res.ok and f"def {BATCH_FUNCTION}" in code:
                        error = check_batch_function(code, states, res.values, sandbox)
                    (out / f"code-{it}-{attempt}.py").write_text(code)
                step = {"iteration": it, "attempt": attempt, "prompt_version": version, "answer": completion.text,
                        "code": code, "ok": error is None, "error": error, "values": values}
                result.steps.append(step)
                log_file.write(json.dumps(step) + "\n")
                log_file.flush()
                if error is None:
                    result.code, result.ok = code, True
                    samples = "\n".join(f"- caption {c!r} -> {v}"
                                         for (_, c), v in list(zip(states, values, strict=False))[:PROMPT_SAMPLES])
                    prompt = improve_t.render(code=code, samples=samples)
                    version = improve_t.version
                    break
                log.warning("BK-Code iteration %d attempt %d failed: %s", it, attempt, error.splitlines()[0])
                prompt = fix_t.render(code=code or completion.text[:1500], error=error[-1500:],
                                      obs_description=obs_text)
                version = fix_t.version
            else:  # every attempt of this iteration failed: start over from the write prompt
                prompt = write_t.render(obs_description=obs_text, caption_examples=examples, env_notes=env_notes,
                                        **told)
                version = write_t.version
    finally:
        log_file.close()
    iterations_valid = len({s["iteration"] for s in result.steps if s["ok"]})
    summary = {"ok": result.ok, "lm_calls": result.lm_calls, "steps": len(result.steps),
               "valid_steps": sum(s["ok"] for s in result.steps),
               "failed_steps": sum(not s["ok"] for s in result.steps),
               "iterations": iterations, "iterations_valid": iterations_valid,
               "first_attempt_valid": sum(s["ok"] for s in result.steps if s["attempt"] == 0),
               "prompt_versions": sorted({s["prompt_version"] for s in result.steps})}
    result.summary = summary
    if result.ok:
        atomic_write_text(out / "final.py", result.code)
    else:
        log.warning("BK-Code: no valid program in %d LM calls (transcript %s)", result.lm_calls, out / "steps.jsonl")
    atomic_write_text(out / "summary.json", json.dumps(summary, indent=2))
    return result


def stack_states(states: Sequence[tuple[dict, str]]) -> tuple[dict[str, np.ndarray], list[str]]:
    """``(obs, caption)`` states as batch columns: stacked observation arrays and the captions."""
    keys = list(states[0][0]) if states else []
    return {k: np.stack([np.asarray(o[k]) for o, _ in states]) for k in keys}, [str(c) for _, c in states]


def check_batch_function(code: str, states: Sequence[tuple[dict, str]], values: np.ndarray,
                         sandbox: Sandbox) -> str | None:
    """None if the program's ``potential_batch`` gives ``values`` (``potential`` per state) on ``states``,
    else the error for the LM (training uses the batch function, so it must agree)."""
    res = sandbox.evaluate_batch(code, "potential", stack_states(states), batch_function=BATCH_FUNCTION)
    if not res.batched:
        return f"`{BATCH_FUNCTION}` failed on a batch of the states:\n{res.batch_error or res.error}"
    bad = np.flatnonzero(~np.isclose(res.values, values, rtol=1e-5, atol=1e-6))
    if len(bad):
        return (f"`{BATCH_FUNCTION}` disagrees with `potential` on {len(bad)} of {len(states)} states "
                f"(e.g. {float(res.values[bad[0]]):.4g} vs {float(values[bad[0]]):.4g}); remove it or fix it")
    return None


class CodePotential:
    """Φ from an LM-written ``potential(obs, caption)``, evaluated in the sandbox, one call per batch.

    The batch goes to the sandbox as columns (the stacked observation arrays and the captions, see
    :meth:`llmguide.sandbox.Sandbox.evaluate_batch`); a program that also defines
    ``potential_batch(obs, captions)`` (checked against ``potential`` when labelled) is evaluated
    vectorised, in one function call per rollout.
    """

    def __init__(self, code: str, sandbox: Sandbox | None = None, clip: float = 10.0,
                 error_log: str | Path | None = None):
        self.code = code
        self.sandbox = sandbox or Sandbox()
        self.clip = float(clip)
        self.error_log = Path(error_log) if error_log else None
        self.calls = self.failed_calls = self.item_errors = self.batched_calls = 0
        self.seconds = 0.0

    def __call__(self, obs: dict[str, np.ndarray], infos: list[dict], actions: np.ndarray) -> np.ndarray:
        n = len(actions)
        columns = ({k: np.asarray(v)[:n] for k, v in obs.items()},
                   [str(infos[i].get("caption", "")) if i < len(infos) else "" for i in range(n)])
        res = self.sandbox.evaluate_batch(self.code, "potential", columns, batch_function=BATCH_FUNCTION)
        self.calls += 1
        self.batched_calls += int(res.batched)
        self.seconds += res.duration
        self.item_errors += res.item_errors
        if not res.ok or res.item_errors or res.batch_error:
            self.failed_calls += int(not res.ok)
            self._record(res.error or res.first_item_error or f"{BATCH_FUNCTION} failed: {res.batch_error}")
        return np.clip(res.values, -self.clip, self.clip)

    def _record(self, error: str) -> None:
        if self.error_log is not None:
            self.error_log.parent.mkdir(parents=True, exist_ok=True)
            with open(self.error_log, "a", encoding="utf-8") as f:
                f.write(json.dumps({"call": self.calls, "error": error[-3000:]}) + "\n")

    def metrics(self) -> dict[str, float]:
        return {"sandbox_calls": self.calls, "sandbox_failed_calls": self.failed_calls,
                "sandbox_item_errors": self.item_errors, "sandbox_batched_calls": self.batched_calls,
                "sandbox_seconds_per_call": self.seconds / max(self.calls, 1)}


