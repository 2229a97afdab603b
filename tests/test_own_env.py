"""Your own Gymnasium env (``env=gym``, :mod:`llmguide.envs.gym_env`): ``llmguide.train(env=<id, class or factory>,
caption=fn)`` trains on it; a reward that asks the LM about captions reads the caption function's text; what the env
or the method cannot do is refused when the config loads, with one line naming the key."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

import llmguide
from llmguide.cli import main
from llmguide.core.errors import ConfigError
from llmguide.envs import make_env, register_env
from llmguide.rewards.base import RewardModule

TINY = dict(num_envs=2, total_steps=256, progress=False, log_every=64, agent={"num_steps": 64, "hidden": 32},
            eval={"episodes": 2})
LABELLER = f"{Path(__file__).resolve()}:CaptionLabeller"


class Corridor(gym.Env):
    """Five rooms in a row, start in room 0; action 2 goes right, 1 left (``Discrete(2, start=1)``); reward 1 and the
    end in room 4, truncated after 20 steps.  The observation is the one-hot room."""

    observation_space = spaces.Box(0.0, 1.0, (5,), np.float32)
    action_space = spaces.Discrete(2, start=1)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.room, self.t = 0, 0
        return self._obs(), {"room": 0}

    def _obs(self):
        return np.eye(5, dtype=np.float32)[self.room]

    def step(self, action):
        assert action in (1, 2), action
        self.room, self.t = min(4, max(0, self.room + (1 if action == 2 else -1))), self.t + 1
        return self._obs(), float(self.room == 4), self.room == 4, self.t >= 20, {"room": self.room}


def room_caption(obs, info):
    """The caption of a Corridor state, read from its own (one-hot) observation."""
    return f"you are in room {int(np.argmax(obs))}"


class Lamp(gym.Env):
    """An 8x8 RGB image (HWC, uint8) with one lit pixel in the left or right half; reward 1 for naming the half."""

    observation_space = spaces.Box(0, 255, (8, 8, 3), np.uint8)
    action_space = spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.side, self.t = int(self.np_random.integers(2)), 0
        return self._obs(), {}

    def _obs(self):
        img = np.zeros((8, 8, 3), np.uint8)
        img[3, 1 + 5 * self.side, 0] = 255
        return img

    def step(self, action):
        self.t += 1
        reward = float(int(action) == self.side)
        self.side = int(self.np_random.integers(2))
        return self._obs(), reward, False, self.t >= 10, {"success": reward > 0}


class BoxActions(Corridor):
    action_space = spaces.Box(-1.0, 1.0, (1,), np.float32)


class TupleObs(Corridor):
    observation_space = spaces.Tuple((spaces.Discrete(5), spaces.Discrete(5)))


class CaptionLabeller(RewardModule):
    """An LM-backed reward (its class takes the LM ``service``): asks the LM whether each new caption shows progress
    and pays 1 where the answer is yes."""

    name = "captions"

    def __init__(self, obs_space, num_envs, device="cpu", seed=0, service=None):
        self.service, self.asked, self.seen = service, {}, 0

    def watch(self, step):
        for info in step.infos:
            self.seen += 1
            caption = info["caption"]
            if caption not in self.asked:
                self.asked[caption] = self.service.submit_score(f"Caption: {caption}\nIs this progress?",
                                                                [" yes", " no"])

    def _yes(self, caption):
        future = self.asked.get(caption)
        if future is None or not future.done() or None in future.result():
            return False
        yes, no = future.result()
        return yes > no

    def compute(self, batch):
        return np.array([[float(self._yes(info["caption"])) for info in row] for row in batch.infos], np.float32)

    def metrics(self):
        return {"seen": float(self.seen), "asked": float(len(self.asked)),
                "answered": float(sum(f.done() for f in self.asked.values()))}


def test_ppo_trains_on_a_gymnasium_id_and_evaluates(tmp_path):
    run = llmguide.train(env="CartPole-v1", method="none", run={"dir": str(tmp_path), "name": "cartpole"},
                         **{"env.max_steps": 30}, **TINY)
    assert run.config["env"] == {"name": "gym", "id": "CartPole-v1", "caption": None, "max_steps": 30}
    returns = [r["charts/episodic_return"] for r in run.metrics if "charts/episodic_return" in r]
    assert returns and all(0 < r <= 30 for r in returns) and run.metrics[-1]["step"] >= 256
    lengths = run.eval["episode_lengths"]
    assert run.eval["episodes"] == 2 and len(lengths) == 2 and all(0 < n <= 30 for n in lengths)
    assert run.eval_return == pytest.approx(np.mean(lengths))   # CartPole pays 1 per step
    policy = llmguide.load_policy(run.path)
    obs, info = policy.make_env(seed=1).reset(seed=1)
    assert obs["vector"].shape == (4,) and obs["vector"].dtype == np.float32 and info["caption"] == ""
    assert policy.act(obs) in (0, 1)


def test_an_image_env_class_with_offset_actions_trains(tmp_path):
    cfg = llmguide.load_config(env=Lamp)
    assert cfg.env.name == "gym" and cfg.env.id == "user/Lamp-v0"
    env = make_env(cfg.env, 0)
    obs, _ = env.reset(seed=0)
    assert env.observation_space["image"].shape == (3, 8, 8) and obs["image"].dtype == np.uint8
    assert obs["image"][0].max() == 255 and obs["image"][1:].max() == 0            # HWC -> CHW, the lit red pixel
    corridor = make_env(llmguide.load_config(env=Corridor).env, 0)
    corridor.reset(seed=0)
    assert corridor.action_space == spaces.Discrete(2) and corridor.step(1)[-1]["room"] == 1   # 1 -> the env's 2
    run = llmguide.train(env=Lamp, method="rnd", run={"dir": str(tmp_path), "name": "lamp"}, **TINY)
    assert run.eval["episode_lengths"] == [10, 10] and "success_rate" in run.eval
    assert any("reward/rnd/loss" in r or any(k.startswith("reward/rnd") for k in r) for r in run.metrics)


def test_an_lm_reward_reads_the_caption_function(tmp_path):
    modules = []
    run = llmguide.train(env=Corridor, caption=room_caption, method="none", llm="random",
                         run={"dir": str(tmp_path), "name": "labels"}, callback=lambda agent, m: modules.append(
                             agent.reward_modules[0][1]),
                         **{"method.reward": LABELLER, "method.intrinsic_coef": 0.1}, **TINY)
    labeller = modules[-1]
    rooms = {f"you are in room {k}" for k in range(5)}
    assert set(labeller.asked) <= rooms and len(labeller.asked) >= 2      # the caption function's text, nothing else
    assert labeller.seen == 256 and sum(f.done() for f in labeller.asked.values()) >= 2   # and the LM answered
    assert run.config["env"]["caption"].endswith("room_caption")
    last = {k: v for r in run.metrics for k, v in r.items()}
    assert last["reward/captions/asked"] == len(labeller.asked) and last["lm/completed"] >= 2
    env = make_env(llmguide.load_config(env=Corridor, caption=room_caption).env, 0)
    _, info = env.reset(seed=0)
    assert info["caption"] == "you are in room 0" and env.step(1)[-1]["caption"] == "you are in room 1"


def test_oni_labels_the_captions_of_your_env_towards_your_goal(tmp_path, capfd):
    """ONI on env=gym: the caption is the message, method.goal the goal its generic prompt carries."""
    from omegaconf import OmegaConf

    from llmguide.methods.oni.recipe import message_annotator, method_goal

    run = llmguide.train(env=Corridor, caption=room_caption, method="oni_retrieval", llm="random",
                         run={"dir": str(tmp_path), "name": "oni"}, **{"method.goal": "reach room 4"}, **TINY)
    last = {k: v for r in run.metrics for k, v in r.items()}
    assert 2 <= last["reward/oni_retrieval/unique_messages"] <= 5 and last["lm/annot_labelled"] >= 2
    assert "oracle LM" not in capfd.readouterr().err     # no ground truth to compare with, and nothing said of it
    cfg = OmegaConf.create(run.config)
    prompt = message_annotator(cfg.method, None, method_goal(cfg), cfg.env.name).prompt("you are in room 3")
    assert "Goal: reach room 4" in prompt and "Message: you are in room 3" in prompt and "Crafter" not in prompt
    err = _refused(tmp_path, env=Corridor, caption=room_caption, method="oni_retrieval", llm="random")
    assert err.key == "method.goal"


def _refused(tmp_path, **kwargs) -> ConfigError:
    with pytest.raises(ConfigError) as err:
        llmguide.train(run={"dir": str(tmp_path), "name": "refused"}, **kwargs, **TINY)
    assert "\n" not in str(err.value) and not (tmp_path / "refused").exists()   # one line, before any compute
    return err.value


def test_what_the_env_cannot_do_is_refused_naming_the_key(tmp_path, capsys):
    err = _refused(tmp_path, env=BoxActions, method="none")
    assert err.key == "env.id" and "action space Box(-1.0, 1.0, (1,), float32)" in err.message
    err = _refused(tmp_path, env=TupleObs, method="none")
    assert err.key == "env.id" and "observation space Tuple(Discrete(5), Discrete(5))" in err.message
    err = _refused(tmp_path, env="CartPole-v1", caption=lambda obs, info: len(obs), method="none")
    assert err.key == "env.caption" and "returned int, not str" in err.message
    register_env("user/BoxActions-v0", BoxActions)
    assert main(["train", "env=gym", "env.id=user/BoxActions-v0", f"run.dir={tmp_path}"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "env.id" in lines[0] and "action space Box" in lines[0]
    with pytest.raises(TypeError, match="not an env instance"):
        llmguide.train(env=Corridor(), method="none")


def test_what_the_method_cannot_do_is_refused_naming_the_key(tmp_path):
    err = _refused(tmp_path, env="CartPole-v1", method="none", llm="random", **{"method.reward": LABELLER})
    assert err.key == "env.caption" and "asks an LM about each state's caption" in err.message
    err = _refused(tmp_path, env=Corridor, caption=room_caption, method="none", llm="oracle",
                   **{"method.reward": LABELLER})
    assert err.key == "llm" and "has none" in err.message
    err = _refused(tmp_path, env=Corridor, caption=room_caption, method="ellm")
    assert err.key == "env" and "got env=gym" in err.message
    err = _refused(tmp_path, env="crafter", caption=room_caption, method="none")
    assert err.key == "caption"
