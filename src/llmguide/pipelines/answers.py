"""``llmguide answers``: build the answer table of a method's LM queries over a data source.

The method says which requests it would send for the data (its recipe's declared ``answer_queries(cfg, dataset)``;
``table_answerers(cfg)``: the ground truth ``llm=oracle`` and its controls answer them with);
:func:`llmguide.llm.table.build_table` answers them with the configured LM (``llm=``), heaviest first, into
``answers.out``.  Train any arm on it with ``llm.table=PATH``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from llmguide.core.errors import ConfigError


def data_captions(data: str | Path) -> tuple[list[str], int]:
    """Every state's caption in the dataset (``data``: a dataset folder or a run dir holding ``dataset/``), and
    the number of episodes."""
    from llmguide.data import EpisodeDataset

    dataset = EpisodeDataset(data)
    captions, episodes = [], 0
    for episode in dataset:
        captions.extend(str(c) for c in episode.captions[:-1])   # the states an agent acted in
        episodes += 1
    return captions, episodes


def lm_name(cfg: DictConfig) -> str:
    """The LM a table is built with: the backend and its model (``embedded:qwen2.5-...``, ``oracle``)."""
    backend = str(cfg.llm.backend)
    model = cfg.llm.get("model")
    return f"{backend}:{model}" if model and backend in ("embedded", "http", "hf") else backend


def build_answers(cfg: DictConfig, recipe: Any) -> int:
    """Build (or resume) the table of ``answers.*`` for the configured method and LM; prints a summary."""
    from llmguide.llm.factory import make_llm
    from llmguide.llm.table import build_table, shown_command, shown_path

    a = cfg.answers
    if a.get("shuffle_of"):
        return shuffle_answers(cfg)
    gather = recipe.answer_queries
    if gather is None:
        raise ConfigError("method", f"method '{cfg.method.name}' has no answer-table support (its recipe declares "
                                    "no answer_queries)")
    if cfg.llm.get("table"):
        raise ConfigError("llm.table", "a table is built by the LM itself: leave llm.table unset here")
    if a.get("requests_of"):
        if a.data:
            raise ConfigError("answers.requests_of", "give answers.data or answers.requests_of, not both")
        dataset = TableStates(a.requests_of)
        source = str(a.requests_of)
    elif not a.data:
        raise ConfigError("answers.data", "name the data source: a dataset folder or a collection run's directory")
    else:
        from llmguide.data import EpisodeDataset

        dataset = EpisodeDataset(a.data)
        source = str(a.data)
    queries = gather(cfg, dataset)
    steps = int(sum(q.weight for q in queries))
    if not queries:
        raise ConfigError("answers.data", f"{a.data} holds nothing method={cfg.method.name} would ask about "
                                          "(no captions / messages: collect with a captioned env)")
    name = lm_name(cfg)
    out = Path(a.out) if a.out else Path(a.data) / f"answers-{name.replace(':', '-')}.sqlite"
    first = queries[0].payload
    meta = {"lm": name, "method": str(cfg.method.name), "env": str(cfg.env.name),
            "prompt_sha256": prompt_sha256(cfg),
            "data": shown_path(source), "data_episodes": len(dataset), "data_steps": steps,
            "command": "llmguide answers " + shown_command(sys.argv[2:]),
            "example_request": str(first.get("prompt") or first.get("context"))[:4000]}
    answerers = recipe.table_answerers(cfg)
    lm = make_llm(cfg.llm, str(cfg.env.name), online=False, answerers=answerers,
                  actions=str(cfg.env.get("actions") or "primitive"))
    try:
        summary = build_table(lm, queries, out, meta=meta, coverage=float(a.coverage),
                              max_queries=None if a.max_queries is None else int(a.max_queries),
                              batch=int(a.batch), progress=bool(cfg.progress))
    finally:
        lm.close()
    if isinstance(dataset, TableStates):
        same = len({q.key for q in queries} & dataset.keys)
        print(f"answers: the states of {source}: {same} of its {len(dataset.keys)} requests asked as they were "
              f"(the rest are the same states asked with this config's prompt)")
    curve = ", ".join(f"{k} of steps: {v}" for k, v in summary["coverage_curve"].items())
    print(f"answers: {out} — {summary['answered']} of {summary['queries_in_data']} distinct queries answered, "
          f"covering {summary['coverage_of_data_steps']:.1%} of the data's {steps} asking steps "
          f"in {summary['seconds']:.0f} s; queries needed for {curve}")
    return 0


class TableStates:
    """The states a built answer table answered, as a dataset (``answers.requests_of``): one episode whose
    captions are each row's state (its query label) repeated by its weight, so a method rebuilds the table's
    requests with its own config's prompt: the same requests when the prompt is the table's (a prompt-only or
    random control over the LM's states), the same states otherwise (another prompt, another LM)."""

    def __init__(self, path: str | Path):
        from llmguide.llm.table import AnswerTable, AnswerTableError

        try:
            table = AnswerTable(path)
        except AnswerTableError as err:
            raise ConfigError("answers.requests_of", str(err)) from None
        try:
            self.keys = table.keys()
            rows = table.rows()
        finally:
            table.close()
        captions: list[str] = []
        for _, label, _, weight in rows:
            captions.extend([str(label)] * max(1, int(round(weight))))
        self.episode = _StatesEpisode(captions + [""])   # an episode's last caption is the state after its end

    def __iter__(self):
        return iter([self.episode])

    def __len__(self) -> int:
        return 1


class _StatesEpisode:
    def __init__(self, captions: list[str]):
        self.captions = captions
        self.messages = captions


def shuffle_answers(cfg: DictConfig) -> int:
    """``answers.shuffle_of=TABLE``: write ``answers.out``, the table's answers permuted among its requests
    (seeded by ``seed``): a knowledge control with the LM's answer distribution and no relation to the request."""
    from llmguide.llm.table import AnswerTableError, shuffle_table

    a = cfg.answers
    if not a.out:
        raise ConfigError("answers.out", "name the shuffled table's file (answers.shuffle_of reads, never writes)")
    if Path(str(a.out)).resolve() == Path(str(a.shuffle_of)).resolve():
        raise ConfigError("answers.out", "must differ from answers.shuffle_of")
    try:
        done = shuffle_table(a.shuffle_of, a.out, int(cfg.seed))
    except AnswerTableError as err:
        raise ConfigError("answers.shuffle_of", str(err)) from None
    print(f"answers: {done['path']} — {done['rows']} answers of {a.shuffle_of} permuted among its requests "
          f"(seed {int(cfg.seed)}; {done['moved']} moved)")
    return 0


def prompt_sha256(cfg: DictConfig) -> str:
    """The hash of what shapes a run's requests: the method keys its recipe declares (``prompt_keys``); a table's
    meta holds its build's."""
    from llmguide.core.provenance import prompt_identity_sha256
    from llmguide.pipelines.recipes import recipe_class

    return prompt_identity_sha256(cfg, recipe_class(cfg).prompt_keys)


def check_table(cfg: DictConfig) -> None:
    """A run reading ``llm.table`` was configured as the table was built: the same LM, method and prompts (its
    meta's ``lm``, ``method`` and ``prompt_sha256``), else :class:`ConfigError` naming both.  A shuffled or
    prompt-only table names the LM and prompts it answers for (a shuffle keeps its source's meta)."""
    from llmguide.llm.table import AnswerTable, AnswerTableError

    try:
        table = AnswerTable(cfg.llm.table)
    except AnswerTableError as err:
        raise ConfigError("llm.table", str(err)) from None
    try:
        meta = table.meta()
    finally:
        table.close()
    mine = {"lm": lm_name(cfg), "method": str(cfg.method.name), "prompt_sha256": prompt_sha256(cfg)}
    what = {"lm": ("llm", "was built by"), "method": ("method", "was built for method"),
            "prompt_sha256": ("method.prompt", "was built with other prompt settings (method.suggester, "
                                               "method.prompt, vocabulary, ...) than this run's; prompt hash")}
    for field, (key, said) in what.items():
        theirs = meta.get(field)
        if theirs is not None and str(theirs) != mine[field]:
            shown = (f"{str(theirs)[:12]} vs {mine[field][:12]}" if field == "prompt_sha256"
                     else f"{theirs!r}, this run is {mine[field]!r}")
            raise ConfigError(key, f"the answer table {cfg.llm.table} {said} {shown}: build a table for this "
                                   "configuration (llmguide answers), or configure the run as the table was built")

