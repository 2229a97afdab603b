"""Map memory and path finding of the scripted Crafter / Craftax-Classic expert (:mod:`.agent`).

The expert sees what a learner sees: the 9x7 semantic view of the observation.  :class:`LocalMap`
keeps the cells it has seen in a map of its own (coordinates relative to the episode's first
position, tracked by dead reckoning: a move succeeds when the faced cell was free, checked against
the next view), forgets every cell farther than ``radius`` (Chebyshev) from the player, and plans on
that memory with Dijkstra (:meth:`LocalMap.plan`): grass, sand and path cost 1, unseen cells 2
(optimistic), stone and trees 3 when they can be dug through (mined or chopped, then walked on).
Map arrays are indexed ``[x, y]`` (x to the right, y down), as Crafter's world.
"""

from __future__ import annotations

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import dijkstra

from llmguide.envs.crafter.rules import SEMANTIC_NAMES

SEM: dict[str, int] = {name: i for i, name in enumerate(SEMANTIC_NAMES) if name}
UNKNOWN, OUTSIDE = -1, 0
WALKABLE = np.array([SEM["grass"], SEM["sand"], SEM["path"]])
MOBS = np.array([SEM["cow"], SEM["zombie"], SEM["skeleton"], SEM["arrow"]])
N_MATERIALS = SEM["furnace"]  # ids 1..12 are materials, 13.. objects (player, cow, zombie, skeleton, arrow, plant)
# primitive action -> (dx, dy); Crafter's and Craftax's action order: noop, left, right, up, down, do, ...
MOVES = {1: (-1, 0), 2: (1, 0), 3: (0, -1), 4: (0, 1)}
ACTION_OF = {d: a for a, d in MOVES.items()}
VIEW_W, VIEW_H = 9, 7
CX, CY = VIEW_W // 2, VIEW_H // 2
SIZE, ORIGIN = 208, 104  # positions stay within +-63 of the start (64x64 worlds); windows up to radius 36
_LUT_WALK = np.zeros(32, bool)
_LUT_WALK[WALKABLE] = True
_INF = np.inf


_GRIDS: dict[int, tuple[np.ndarray, np.ndarray]] = {}


def _grid(n: int) -> tuple[np.ndarray, np.ndarray]:
    """CSR layout of an n x n 4-neighbour grid: indptr and the 4 neighbours of each cell (itself off the edge)."""
    if n not in _GRIDS:
        ii, jj = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
        nbr = []
        for dx, dy in MOVES.values():
            x, y = ii + dx, jj + dy
            inside = (x >= 0) & (x < n) & (y >= 0) & (y < n)
            nbr.append(np.where(inside, x * n + y, ii * n + jj).reshape(-1))
        _GRIDS[n] = (np.arange(0, 4 * n * n + 1, 4), np.stack(nbr, axis=1).reshape(-1))
    return _GRIDS[n]


def view_ids(image: np.ndarray) -> np.ndarray:
    """Semantic ids ``[..., x, y]`` (9x7) from one-hot view planes ``[..., C, y, x]``."""
    return np.swapaxes(np.argmax(image, axis=-3), -1, -2)


class Plan:
    """Dijkstra distances from the player over a window of the map, and how to walk them."""

    def __init__(self, lmap: LocalMap, dist: np.ndarray, pred: np.ndarray, x0: int, y0: int, n: int):
        self.map, self.dist, self.pred, self.x0, self.y0, self.n = lmap, dist, pred, x0, y0, n

    def window(self, array: np.ndarray) -> np.ndarray:
        return array[self.x0:self.x0 + self.n, self.y0:self.y0 + self.n]

    def _first_step(self, node: int) -> tuple[int, int]:
        """The window cell one step from the player on the shortest path to ``node``."""
        src = self._source
        while True:
            prev = int(self.pred[node])
            if prev == src or prev < 0:
                return divmod(node, self.n)
            node = prev

    @property
    def _source(self) -> int:
        px, py = self.map.pos
        return (px - self.x0) * self.n + (py - self.y0)

    def reach(self, targets: np.ndarray, stand: bool = False) -> tuple[float, np.ndarray, np.ndarray] | None:
        """Nearest of the window cells ``targets`` (bool, window shape): to stand on (``stand``) or to
        face from a 4-neighbour.  Returns (path cost, target cell, first step cell) in map coordinates,
        the first step being the target itself when the player is already next to it (or on it)."""
        dist = self.dist
        if stand:
            score = np.where(targets, dist, _INF)
        else:
            pad = np.pad(dist, 1, constant_values=_INF)
            near = np.minimum(np.minimum(pad[:-2, 1:-1], pad[2:, 1:-1]), np.minimum(pad[1:-1, :-2], pad[1:-1, 2:]))
            score = np.where(targets, near + 1.0, _INF)
        flat = int(np.argmin(score))
        best = float(score.flat[flat])
        if not np.isfinite(best):
            return None
        tx, ty = divmod(flat, self.n)
        target = np.array([tx + self.x0, ty + self.y0])
        pos = self.map.pos
        if (target == pos).all() or np.abs(target - pos).sum() == 1:
            return best, target, target
        if stand:
            node = flat
        else:  # the neighbour of the target the path ends on
            cand = [(tx + dx, ty + dy) for dx, dy in MOVES.values() if 0 <= tx + dx < self.n and 0 <= ty + dy < self.n]
            nx, ny = min(cand, key=lambda c: dist[c])
            node = nx * self.n + ny
            if (np.array([nx + self.x0, ny + self.y0]) == pos).all():
                return best, target, target
        sx, sy = self._first_step(node)
        return best, target, np.array([sx + self.x0, sy + self.y0])


class LocalMap:
    """The cells one agent has seen, within ``radius`` of where it is; objects only from the current view."""

    def __init__(self, radius: int = 24):
        if not 1 <= radius <= 36:
            raise ValueError(f"expert memory radius must be in [1, 36], got {radius}")
        self.radius = int(radius)
        self.mat = np.full((SIZE, SIZE), UNKNOWN, np.int8)
        self.pos = np.array([ORIGIN, ORIGIN])
        self.prev = self.pos.copy()  # the cell the agent came from: stepping back costs more (no dithering)
        self.mobs: list[tuple[int, int, int]] = []  # (semantic id, x, y) in the current view
        self.plants: dict[tuple[int, int], int] = {}  # plant cell -> step it was first seen
        self.cows: dict[tuple[int, int], int] = {}  # where cows were seen lately -> step
        self.last_water: tuple[int, int] | None = None  # the one landmark kept beyond the radius
        self.view: np.ndarray | None = None
        self.t = 0

    # --- update ------------------------------------------------------------------------
    def observe(self, ids: np.ndarray, action: int | None, asleep: bool) -> None:
        """Integrate the view ``ids`` (9x7 ``[x, y]``) seen after taking ``action``."""
        if self.view is not None and action in MOVES and not asleep:
            d = np.array(MOVES[action])
            faced = int(self.view[CX + d[0], CY + d[1]])
            predicted = bool(_LUT_WALK[faced]) or faced == SEM["lava"]
            if self._moved(ids, d, predicted):
                self.prev = self.pos.copy()
                self.pos = np.clip(self.pos + d, CX + 1, SIZE - CX - 2)
        self._write(ids)
        self._forget()
        self.view = ids
        self.t += 1

    def _moved(self, ids: np.ndarray, d: np.ndarray, predicted: bool) -> bool:
        """Whether the view fits the map better shifted by ``d`` (moved) or not; ties: ``predicted``."""
        static = (ids >= 1) & (ids <= N_MATERIALS)
        static[CX - 1:CX + 2, CY - 1:CY + 2] = False  # cells next to the player may just have changed
        wrong = []
        for shift in ((0, 0), tuple(d)):
            x0, y0 = self.pos[0] + shift[0] - CX, self.pos[1] + shift[1] - CY
            known = self.mat[x0:x0 + VIEW_W, y0:y0 + VIEW_H]
            mask = static & (known > 0) & (known <= N_MATERIALS)
            wrong.append(int((known[mask] != ids[mask]).sum()))
        if wrong[0] == wrong[1]:
            return predicted
        return wrong[1] < wrong[0]

    def _write(self, ids: np.ndarray) -> None:
        x0, y0 = self.pos[0] - CX, self.pos[1] - CY
        win = self.mat[x0:x0 + VIEW_W, y0:y0 + VIEW_H]
        material = ids <= N_MATERIALS
        win[material] = ids[material]
        win[ids == SEM["plant"]] = SEM["plant"]
        moving = np.isin(ids, MOBS) | (ids == SEM["player"])
        # a creature stands on a walkable cell: keep what was known there, else guess grass
        guess = moving & ~_LUT_WALK[np.maximum(win, 0)]
        win[guess & (ids != SEM["arrow"])] = SEM["grass"]
        wx, wy = np.nonzero(ids == SEM["water"])
        if len(wx):
            k = int(np.argmin(np.abs(wx - CX) + np.abs(wy - CY)))
            self.last_water = (int(wx[k] + x0), int(wy[k] + y0))
        xs, ys = np.nonzero(np.isin(ids, MOBS))
        self.mobs = [(int(ids[x, y]), int(x + x0), int(y + y0)) for x, y in zip(xs, ys, strict=True)]
        in_view = {(x, y) for x, y in self.cows if abs(x - self.pos[0]) <= CX and abs(y - self.pos[1]) <= CY}
        for cell in in_view:
            del self.cows[cell]
        for sid, x, y in self.mobs:
            if sid == SEM["cow"]:
                self.cows[(x, y)] = self.t
        seen = {(int(x + x0), int(y + y0)) for x, y in zip(*np.nonzero(ids == SEM["plant"]), strict=True)}
        for cell in seen:
            self.plants.setdefault(cell, self.t)
        for cell in list(self.plants):  # a plant in view that is gone was eaten or trampled
            if cell not in seen and abs(cell[0] - self.pos[0]) <= CX and abs(cell[1] - self.pos[1]) <= CY:
                del self.plants[cell]

    def _forget(self) -> None:
        r, (px, py) = self.radius, self.pos
        lo_x, hi_x, lo_y, hi_y = max(px - r, 0), px + r + 1, max(py - r, 0), py + r + 1
        self.mat[:lo_x] = UNKNOWN
        self.mat[hi_x:] = UNKNOWN
        self.mat[:, :lo_y] = UNKNOWN
        self.mat[:, hi_y:] = UNKNOWN
        for cell in [c for c in self.plants if max(abs(c[0] - px), abs(c[1] - py)) > r]:
            del self.plants[cell]
        for cell in [c for c, t in self.cows.items() if max(abs(c[0] - px), abs(c[1] - py)) > r or self.t - t > 150]:
            del self.cows[cell]

    # --- queries -----------------------------------------------------------------------
    def facing_cell(self, facing: tuple[int, int]) -> tuple[int, int]:
        return int(self.pos[0] + facing[0]), int(self.pos[1] + facing[1])

    def at(self, cell) -> int:
        """What the map holds at ``cell``: a creature of the current view, else the material."""
        for sid, x, y in self.mobs:
            if (x, y) == (int(cell[0]), int(cell[1])):
                return sid
        return int(self.mat[int(cell[0]), int(cell[1])])

    def free(self, cell) -> bool:
        """Walkable and no creature on it."""
        return bool(_LUT_WALK[max(self.at(cell), 0)])

    def plan(self, dig_stone: bool, dig_tree: bool = True, avoid_zombies: bool = True) -> Plan:
        """Dijkstra from the player over the window of side ``2 * radius + 1`` around it."""
        r = self.radius
        n = 2 * r + 1
        x0, y0 = self.pos[0] - r, self.pos[1] - r
        win = self.crop(x0, y0, n)
        cost = np.full((n, n), _INF)
        cost[_LUT_WALK[np.maximum(win, 0)]] = 1.0
        cost[win == UNKNOWN] = 2.0
        if dig_stone:
            cost[win == SEM["stone"]] = 3.0
        if dig_tree:
            cost[win == SEM["tree"]] = 3.0
        ii, jj = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
        for sid, x, y in self.mobs:
            i, j = x - x0, y - y0
            if avoid_zombies and sid in (SEM["zombie"], SEM["skeleton"]):  # keep away from them (and arrows)
                reach = 1 if sid == SEM["zombie"] else 4
                cost[np.abs(ii - i) + np.abs(jj - j) <= reach] += 3.0
        if (self.prev != self.pos).any():
            cost[self.prev[0] - x0, self.prev[1] - y0] += 2.0
        for _, x, y in self.mobs:
            cost[x - x0, y - y0] = _INF
        indptr, nbr = _grid(n)
        w = cost.reshape(-1)[nbr]  # edge u -> v costs entering v; a missing edge is a self-loop
        bad = ~np.isfinite(w)
        w[bad] = 1.0
        graph = csr_matrix((w, np.where(bad, np.repeat(np.arange(n * n), 4), nbr), indptr), shape=(n * n, n * n))
        source = r * n + r
        dist, pred = dijkstra(graph, indices=source, return_predecessors=True)
        return Plan(self, dist.reshape(n, n), pred, int(x0), int(y0), n)

    def window_of(self, plan: Plan) -> np.ndarray:
        """The map (materials) over ``plan``'s window, OUTSIDE beyond the map's edge."""
        return self.crop(plan.x0, plan.y0, plan.n)

    def crop(self, x0: int, y0: int, n: int, fill: int = OUTSIDE) -> np.ndarray:
        """The n x n map cells ``[x0 .., y0 ..]`` (``[x, y]``, int16), ``fill`` beyond the map's edge."""
        win = np.full((n, n), fill, np.int16)
        xs, ys = max(x0, 0), max(y0, 0)
        part = self.mat[xs:x0 + n, ys:y0 + n]
        win[xs - x0:xs - x0 + part.shape[0], ys - y0:ys - y0 + part.shape[1]] = part
        return win
