"""Craftax-Classic state → Crafter's text contract: semantic view, caption keys, event bits.

Everything above ``# --- host side`` runs inside JAX (vmapped over envs). Per env it computes

* the 9x7 local view in Crafter's semantic ids (:data:`llmguide.envs.crafter.env.SEMANTIC_NAMES`):
  blocks from ``state.map``; mobs from each mob array's ``position`` and ``mask`` (Classic's
  ``mob_map`` is boolean and says nothing about the mob's type, so it is never read);
* a **caption key**: 4 uint32 words holding exactly what the caption depends on (nearest distance
  of every visible class, facing class, non-vital item counts, which vitals are low, sleeping).
  Two states with the same key have the same caption, so strings are built once per key;
* **event bits** from real state changes between the state before and after the step: bit ``i``
  is Crafter's achievement ``ACHIEVEMENTS[i]`` (every time it happens, like Crafter's counters,
  not only the first unlock), bit 22 "take damage", bit 23 "die";
* a **message key** (:func:`message_key`, 4 uint32 words, all 0 when nothing happened): the differences that
  the message line of :mod:`llmguide.envs.crafter.messages` captions (event bits, inventory deltas, vitals
  crossing thresholds, the damage source, a failed action, a creature hit, water/lava newly adjacent, kinds
  newly in view, falling asleep, waking), by the same rules as its :func:`~llmguide.envs.crafter.messages.diff`.

The host side decodes keys and event bits into Crafter's strings with Crafter's own
:func:`~llmguide.envs.crafter.env.caption` and :func:`~llmguide.envs.crafter.messages.render`, caching one
entry per key (a message only for the envs whose key is not 0).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from craftax.craftax_classic.constants import Achievement, Action, BlockType
from craftax.craftax_classic.game_logic import get_player_attack_damage

from llmguide.envs.crafter import messages as msg
from llmguide.envs.crafter.rules import (
    ACHIEVEMENTS,
    EVENTS,
    FEEL_BELOW,
    ITEMS,
    SEMANTIC_NAMES,
    VITALS,
    caption,
)

VIEW_H, VIEW_W = 7, 9  # rows (Crafter y) x columns (Crafter x); the player sits at (3, 4)
CY, CX = VIEW_H // 2, VIEW_W // 2
N_SEM = len(SEMANTIC_NAMES)  # 19
SEM = {name: i for i, name in enumerate(SEMANTIC_NAMES)}
PLAYER = SEM["player"]

# Craftax-Classic BlockType -> Crafter semantic id (plants are blocks in Craftax, objects in Crafter)
_BLOCK_NAMES = {
    BlockType.INVALID: None, BlockType.OUT_OF_BOUNDS: None, BlockType.GRASS: "grass",
    BlockType.WATER: "water", BlockType.STONE: "stone", BlockType.TREE: "tree", BlockType.WOOD: "tree",
    BlockType.PATH: "path", BlockType.COAL: "coal", BlockType.IRON: "iron", BlockType.DIAMOND: "diamond",
    BlockType.CRAFTING_TABLE: "table", BlockType.FURNACE: "furnace", BlockType.SAND: "sand",
    BlockType.LAVA: "lava", BlockType.PLANT: "plant", BlockType.RIPE_PLANT: "plant",
}
BLOCK_TO_SEM = np.array([SEM[_BLOCK_NAMES[b]] for b in sorted(BlockType, key=lambda b: b.value)], np.int32)
MOBS = (("zombies", "zombie"), ("cows", "cow"), ("skeletons", "skeleton"), ("arrows", "arrow"))

# classes that can be "seen": everything but nothing (0) and the player
VISIBLE_IDS = np.array([i for i, n in enumerate(SEMANTIC_NAMES) if n not in (None, "player")], np.int32)
ABSENT = 15  # 4-bit distance code for "not in view" (the largest real distance is 4 + 3 = 7)
NON_VITALS = [k for k in ITEMS if k not in VITALS]  # sapling, wood, ..., iron_sword (12)
INV_FIELDS = {k: k for k in NON_VITALS}
VITAL_FIELDS = {"health": "player_health", "food": "player_food", "drink": "player_drink",
                "energy": "player_energy"}
# Craftax's achievement index of each Crafter achievement (Craftax lists them in another order)
CRAFTAX_INDEX = np.array([Achievement[name.upper()].value for name in ACHIEVEMENTS], np.int32)
BIT = {name: i for i, name in enumerate(ACHIEVEMENTS)}
TAKE_DAMAGE, DIE = len(ACHIEVEMENTS), len(ACHIEVEMENTS) + 1
# DIRECTIONS index (player_direction 1..4 = left, right, up, down) -> (d_row, d_col)
_DIRS = np.array([[0, 0], [0, -1], [0, 1], [-1, 0], [1, 0]], np.int32)
# message key: bit j of the "seen" mask is VISIBLE_IDS[j]; only SIGHTS are news
_VISIBLE_NAMES = [SEMANTIC_NAMES[i] for i in VISIBLE_IDS]
SIGHT_MASK = sum(1 << j for j, n in enumerate(_VISIBLE_NAMES) if n in msg.SIGHTS)
ACH_MASK = (1 << len(ACHIEVEMENTS)) - 1
_SOURCE_CODE = {name: i + 1 for i, name in enumerate(msg.DAMAGE_SOURCES)}  # 0: no damage
_CREATURE_FIELDS = (("cows", "cow"), ("zombies", "zombie"), ("skeletons", "skeleton"))  # hit codes 1..3


def inventory_vector(state) -> jax.Array:
    """Crafter's ``ITEMS`` order (vitals first), int32 (16,)."""
    vals = [getattr(state, VITAL_FIELDS[k]) if k in VITALS else getattr(state.inventory, INV_FIELDS[k])
            for k in ITEMS]
    return jnp.stack([jnp.asarray(v, jnp.int32) for v in vals])


def target_cell(state) -> jax.Array:
    """World (row, col) of the cell the player faces."""
    return state.player_position + jnp.asarray(_DIRS)[state.player_direction]


def local_ids(state) -> jax.Array:
    """(7, 9) int32 Crafter semantic ids of the local view; 0 outside the world."""
    pad = max(VIEW_H, VIEW_W)
    padded = jnp.pad(state.map, pad, constant_values=BlockType.OUT_OF_BOUNDS.value)
    corner = state.player_position - jnp.array([CY, CX]) + pad
    ids = jnp.asarray(BLOCK_TO_SEM)[jax.lax.dynamic_slice(padded, corner, (VIEW_H, VIEW_W))]
    for field, name in MOBS:
        mobs = getattr(state, field)
        local = mobs.position - state.player_position + jnp.array([CY, CX])
        on = mobs.mask & (local[:, 0] >= 0) & (local[:, 0] < VIEW_H) & (local[:, 1] >= 0) & (local[:, 1] < VIEW_W)
        rows = jnp.where(on, local[:, 0], VIEW_H)  # off-view mobs write out of range: dropped
        ids = ids.at[rows, local[:, 1]].set(SEM[name], mode="drop")
    return ids.at[CY, CX].set(PLAYER)


def caption_key(state, ids: jax.Array) -> jax.Array:
    """uint32 (4,): nearest distance of each visible class, facing, items, low vitals, sleeping."""
    rr, cc = jnp.meshgrid(jnp.arange(VIEW_H), jnp.arange(VIEW_W), indexing="ij")
    dist = jnp.abs(rr - CY) + jnp.abs(cc - CX)
    hit = ids[None] == jnp.asarray(VISIBLE_IDS)[:, None, None]
    near = jnp.where(hit, dist[None], ABSENT).min(axis=(1, 2)).astype(jnp.uint32)  # (17,)
    d = jnp.asarray(_DIRS)[state.player_direction]
    facing = ids[CY + d[0], CX + d[1]].astype(jnp.uint32)
    inv = inventory_vector(state)
    low = (inv[:4] < FEEL_BELOW).astype(jnp.uint32)
    items = jnp.clip(inv[4:], 0, 15).astype(jnp.uint32)  # 12 non-vital counts
    sh4 = jnp.arange(8, dtype=jnp.uint32) * 4
    w0 = (near[:8] << sh4).sum(dtype=jnp.uint32)
    w1 = (near[8:16] << sh4).sum(dtype=jnp.uint32)
    w2 = (near[16] | (facing << 4) | (jnp.asarray(state.is_sleeping, jnp.uint32) << 9)
          | (low << jnp.arange(10, 14, dtype=jnp.uint32)).sum(dtype=jnp.uint32)
          | (items[:4] << (14 + jnp.arange(4, dtype=jnp.uint32) * 4)).sum(dtype=jnp.uint32))
    w3 = (items[4:] << sh4).sum(dtype=jnp.uint32)
    return jnp.stack([w0, w1, w2, w3])


def _killed(before, field: str, target: jax.Array, doing: jax.Array, damage: jax.Array) -> jax.Array:
    mobs = getattr(before, field)
    hit = mobs.mask & (mobs.position == target).all(axis=-1)
    return doing & (hit & (mobs.health - damage <= 0)).any()


def event_bits(before, after, action: jax.Array) -> jax.Array:
    """int32 bit set of the events of one transition ``before --action--> after``."""
    fired = after.achievements & ~before.achievements  # first unlocks, in Craftax order
    first = fired[jnp.asarray(CRAFTAX_INDEX)]  # (22,) in Crafter order
    action = jnp.where(before.is_sleeping, Action.NOOP.value, action)  # Craftax ignores actions asleep
    doing = action == Action.DO.value
    inv0, inv1 = inventory_vector(before), inventory_vector(after)
    up = {k: inv1[i] > inv0[i] for i, k in enumerate(ITEMS)}
    t = target_cell(before)
    h, w = before.map.shape
    inside = (t[0] >= 0) & (t[0] < h) & (t[1] >= 0) & (t[1] < w)
    tt = jnp.clip(t, 0, jnp.array([h - 1, w - 1]))
    block0, block1 = before.map[tt[0], tt[1]], after.map[tt[0], tt[1]]

    def placed(block: BlockType) -> jax.Array:
        return inside & (block0 != block.value) & (block1 == block.value)

    damage = get_player_attack_damage(before)
    now = {
        "collect_coal": up["coal"], "collect_diamond": up["diamond"], "collect_iron": up["iron"],
        "collect_sapling": up["sapling"], "collect_stone": up["stone"], "collect_wood": up["wood"],
        "collect_drink": doing & inside & (block0 == BlockType.WATER.value),
        "defeat_skeleton": _killed(before, "skeletons", t, doing, damage),
        "defeat_zombie": _killed(before, "zombies", t, doing, damage),
        "eat_cow": _killed(before, "cows", t, doing, damage),
        "eat_plant": inside & (block0 == BlockType.RIPE_PLANT.value) & (block1 == BlockType.PLANT.value),
        "make_iron_pickaxe": up["iron_pickaxe"], "make_iron_sword": up["iron_sword"],
        "make_stone_pickaxe": up["stone_pickaxe"], "make_stone_sword": up["stone_sword"],
        "make_wood_pickaxe": up["wood_pickaxe"], "make_wood_sword": up["wood_sword"],
        "place_furnace": placed(BlockType.FURNACE), "place_plant": placed(BlockType.PLANT),
        "place_stone": placed(BlockType.STONE), "place_table": placed(BlockType.CRAFTING_TABLE),
        "wake_up": before.is_sleeping & ~after.is_sleeping,
    }
    ach = jnp.stack([now[name] for name in ACHIEVEMENTS]) | first
    bits = (ach.astype(jnp.int32) << jnp.arange(len(ACHIEVEMENTS), dtype=jnp.int32)).sum()
    bits = bits | ((after.player_health < before.player_health).astype(jnp.int32) << TAKE_DAMAGE)
    return bits | (is_dead(after).astype(jnp.int32) << DIE)


def action_effects(before, after, action: jax.Array) -> jax.Array:
    """bool (3,): the player moved, fell asleep, hit a creature it faced (for ELLM's ``eval_success``)."""
    action = jnp.where(before.is_sleeping, Action.NOOP.value, action)
    moved = (after.player_position != before.player_position).any()
    asleep = ~before.is_sleeping & after.is_sleeping
    t = target_cell(before)
    hit = jnp.zeros((), jnp.bool_)
    for field in ("zombies", "cows", "skeletons"):
        mobs = getattr(before, field)
        hit = hit | (mobs.mask & (mobs.position == t).all(axis=-1)).any()
    return jnp.stack([moved, asleep, hit & (action == Action.DO.value)])


def seen_bits(key: jax.Array) -> jax.Array:
    """uint32 bit set of the classes in view (bit j: ``VISIBLE_IDS[j]``), read from a caption key."""
    sh = jnp.arange(8, dtype=jnp.uint32) * 4
    near = jnp.concatenate([(key[0] >> sh) & 15, (key[1] >> sh) & 15, (key[2:3] & 15)])
    return ((near != ABSENT).astype(jnp.uint32) << jnp.arange(len(VISIBLE_IDS), dtype=jnp.uint32)).sum(
        dtype=jnp.uint32)


def _distances(mobs, position: jax.Array) -> jax.Array:
    """Manhattan distance of every mob to ``position``; far away for masked-out slots."""
    return jnp.where(mobs.mask, jnp.abs(mobs.position - position).sum(axis=-1), 1 << 20)


def _touching(state) -> jax.Array:
    """bool (2,): water, lava underfoot or 4-adjacent."""
    h, w = state.map.shape
    cells = state.player_position + jnp.asarray([[0, 0], [0, -1], [0, 1], [-1, 0], [1, 0]], jnp.int32)
    cells = jnp.clip(cells, 0, jnp.array([h - 1, w - 1]))
    blocks = state.map[cells[:, 0], cells[:, 1]]
    return jnp.stack([(blocks == BlockType.WATER.value).any(), (blocks == BlockType.LAVA.value).any()])


def message_key(before, after, action: jax.Array, bits: jax.Array, seen0: jax.Array, seen1: jax.Array) -> jax.Array:
    """uint32 (4,) of one transition, 0 when nothing happened (the rules of :func:`messages.diff`):

    word 0 the event bits; word 1 the deltas of the first 8 non-vital items (4-bit two's complement); word 2
    the last 4 deltas (bits 0-15), vitals gone low (16-19), back to ok (20-23), empty (24-27, food/drink/energy),
    damage source (28-30, 1 + index in DAMAGE_SOURCES), failed action (31); word 3 sights newly in view (bits
    0-16), creature hit (17-18: cow, zombie, skeleton), water (19) and lava (20) newly adjacent, fell asleep
    (21), woke up (22)."""
    action = jnp.where(before.is_sleeping, Action.NOOP.value, action)
    inv0, inv1 = inventory_vector(before), inventory_vector(after)
    delta = jnp.clip(inv1[4:] - inv0[4:], -8, 7)
    nib = (delta & 15).astype(jnp.uint32)
    sh4 = jnp.arange(8, dtype=jnp.uint32) * 4
    v0, v1 = inv0[:4], inv1[:4]
    low = (v0 >= FEEL_BELOW) & (v1 < FEEL_BELOW)
    ok = (v0 < FEEL_BELOW) & (v1 >= FEEL_BELOW)
    empty = (v0 > 0) & (v1 == 0) & jnp.array([False, True, True, True])
    pos = after.player_position
    hurt = after.player_health < before.player_health
    source = jnp.select(
        [after.map[pos[0], pos[1]] == BlockType.LAVA.value, (_distances(after.zombies, pos) == 1).any(),
         (_distances(before.arrows, pos) <= msg.ARROW_RANGE).any()
         | (_distances(after.skeletons, pos) <= msg.SKELETON_RANGE).any(),
         after.player_food == 0, after.player_drink == 0, (after.player_energy == 0) & ~after.is_sleeping],
        [_SOURCE_CODE[k] for k in ("lava", "zombie", "arrow", "hunger", "thirst", "fatigue")],
        _SOURCE_CODE["unknown"])
    source = jnp.where(hurt, source, 0).astype(jnp.uint32)
    t = target_cell(before)
    h, w = before.map.shape
    tt = jnp.clip(t, 0, jnp.array([h - 1, w - 1]))
    sem = jnp.asarray(BLOCK_TO_SEM)
    block_changed = sem[before.map[tt[0], tt[1]]] != sem[after.map[tt[0], tt[1]]]
    doing = action == Action.DO.value
    hit = jnp.zeros((), jnp.uint32)
    for code, (field, _) in enumerate(_CREATURE_FIELDS, start=1):
        mobs = getattr(before, field)
        there = doing & (mobs.mask & (mobs.position == t).all(axis=-1)).any()
        hit = jnp.where(there & (hit == 0), jnp.uint32(code), hit)
    changed = ((bits & ACH_MASK) != 0) | (delta != 0).any() | (hit > 0) | block_changed \
        | (after.player_position != before.player_position).any() | (after.player_direction != before.player_direction) \
        | (after.is_sleeping != before.is_sleeping)
    failed = (action != Action.NOOP.value) & ~changed
    ar = jnp.arange(4, dtype=jnp.uint32)
    touch = _touching(after) & ~_touching(before)
    w1 = (nib[:8] << sh4).sum(dtype=jnp.uint32)
    w2 = ((nib[8:] << sh4[:4]).sum(dtype=jnp.uint32) | (low.astype(jnp.uint32) << (16 + ar)).sum(dtype=jnp.uint32)
          | (ok.astype(jnp.uint32) << (20 + ar)).sum(dtype=jnp.uint32)
          | (empty.astype(jnp.uint32) << (24 + ar)).sum(dtype=jnp.uint32)
          | (source << 28) | (failed.astype(jnp.uint32) << 31))
    u = jnp.uint32
    w3 = ((seen1 & ~seen0 & u(SIGHT_MASK)) | (hit << 17) | (touch[0].astype(u) << 19) | (touch[1].astype(u) << 20)
          | ((~before.is_sleeping & after.is_sleeping).astype(u) << 21)
          | ((before.is_sleeping & ~after.is_sleeping).astype(u) << 22))
    return jnp.stack([bits.astype(jnp.uint32), w1, w2, w3])


def is_dead(state) -> jax.Array:
    """Health at 0 or standing in lava (Crafter's lava sets health to 0)."""
    in_lava = state.map[state.player_position[0], state.player_position[1]] == BlockType.LAVA.value
    return (state.player_health <= 0) | in_lava


# --- host side -----------------------------------------------------------------------------------
def decode_key(key: np.ndarray) -> tuple[str, list[str], str]:
    """(caption, visible names nearest first, facing name) of one caption key (4 uint32 words)."""
    w0, w1, w2, w3 = (int(v) for v in key)
    near = [(w0 >> (4 * j)) & 15 for j in range(8)] + [(w1 >> (4 * j)) & 15 for j in range(8)] + [w2 & 15]
    seen = {SEMANTIC_NAMES[VISIBLE_IDS[j]]: d for j, d in enumerate(near) if d != ABSENT}
    visible = sorted(seen, key=lambda n: (seen[n], n))
    facing = SEMANTIC_NAMES[(w2 >> 4) & 31] or "nothing"
    sleeping = bool((w2 >> 9) & 1)
    inventory = {k: (FEEL_BELOW - 1 if (w2 >> (10 + i)) & 1 else 9) for i, k in enumerate(VITALS)}
    counts = [(w2 >> (14 + 4 * j)) & 15 for j in range(4)] + [(w3 >> (4 * j)) & 15 for j in range(8)]
    inventory.update(dict(zip(NON_VITALS, counts, strict=True)))
    return caption(visible, facing, inventory, sleeping), visible, facing


def decode_message(key: np.ndarray) -> msg.Change:
    """The :class:`~llmguide.envs.crafter.messages.Change` of one message key (4 uint32 words)."""
    bits, w1, w2, w3 = (int(v) for v in key)
    nibs = [(w1 >> (4 * j)) & 15 for j in range(8)] + [(w2 >> (4 * j)) & 15 for j in range(4)]
    delta = {k: n - 16 if n >= 8 else n for k, n in zip(NON_VITALS, nibs, strict=True)}
    vitals = []
    for i, k in enumerate(VITALS):
        vitals += [(k, kind) for kind, at in (("low", 16), ("ok", 20), ("empty", 24)) if (w2 >> (at + i)) & 1]
    source, hit = (w2 >> 28) & 7, (w3 >> 17) & 3
    return msg.Change(
        failed=bool(w2 >> 31 & 1), hit=_CREATURE_FIELDS[hit - 1][1] if hit else None,
        achievements=tuple(a for i, a in enumerate(ACHIEVEMENTS) if bits >> i & 1),
        gained=tuple((k, d) for k, d in delta.items() if d > 0), lost=tuple((k, -d) for k, d in delta.items() if d < 0),
        fell_asleep=bool(w3 >> 21 & 1), woke_up=bool(w3 >> 22 & 1),
        damage=msg.DAMAGE_SOURCES[source - 1] if source else None,
        vitals=tuple(vitals),
        touched=tuple(k for j, k in enumerate(msg.TOUCH) if w3 >> (19 + j) & 1),
        seen=tuple(k for k in msg.SIGHTS if w3 >> _VISIBLE_NAMES.index(k) & 1),
        died=bool(bits >> DIE & 1))


class TextCache:
    """Caption strings per caption key, event lists per event bit set and messages per message key, built once
    each."""

    def __init__(self) -> None:
        self.captions: dict[bytes, tuple[str, list[str], str]] = {}
        self.events: dict[int, list[str]] = {0: []}
        self.messages: dict[bytes, str] = {}
        self.lookups = 0

    def message_list(self, keys: np.ndarray) -> list[str]:
        """One message line per row of ``keys`` (N, 4) uint32; ``""`` for a 0 key, without a look-up."""
        keys = np.ascontiguousarray(keys, dtype=np.uint32)
        out = [""] * len(keys)
        raw, cache = keys.tobytes(), self.messages
        for i in np.flatnonzero(keys.any(axis=1)).tolist():
            k = raw[16 * i:16 * i + 16]
            text = cache.get(k)
            if text is None:
                text = cache[k] = msg.render(decode_message(keys[i]))
            out[i] = text
        return out

    def lookup(self, keys: np.ndarray) -> list[tuple[str, list[str], str]]:
        """One (caption, visible, facing) per row of ``keys`` (N, 4) uint32."""
        raw = np.ascontiguousarray(keys, dtype=np.uint32).tobytes()
        cache, out = self.captions, []
        for i in range(len(keys)):
            k = raw[16 * i:16 * i + 16]
            hit = cache.get(k)
            if hit is None:
                hit = cache[k] = decode_key(keys[i])
            out.append(hit)
        self.lookups += len(keys)
        return out

    def event_list(self, bits: int) -> list[str]:
        """A fresh list of the event names in ``bits`` (Crafter's order)."""
        names = self.events.get(bits)
        if names is None:
            names = self.events[bits] = [EVENTS[i] for i in range(len(EVENTS)) if bits >> i & 1]
        return list(names)


__all__ = ["TextCache", "action_effects", "caption_key", "decode_key", "decode_message", "event_bits",
           "inventory_vector", "is_dead", "local_ids", "message_key", "seen_bits"]
