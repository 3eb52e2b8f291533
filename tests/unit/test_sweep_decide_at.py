"""decide_at as a sweep episode setting: carried from the grid (or an override set) to each episode's EpisodeConfig,
and into the grid hash only when it is not the default, so a sweep written before it existed resumes its own
episodes (same ids, same hash)."""

from __future__ import annotations

from graph.services.sweep.episode import episode_config
from graph.services.sweep.grid import Episode, expand, grid_hash
from tests.unit.test_sweep_grid import _grid  # the grid its tests expand

# the hash of this grid as the code before decide_at wrote it (graph/services/sweep/grid.py at f82ee58~1): a sweep started
# then must resume now
HASH_BEFORE_DECIDE_AT = "a6210066abbdad5d92c47727c4651f5d95cb07268b6d5b89f045a27548a530a7"


def test_the_default_leaves_every_existing_grid_hash_as_it_was():
    eps = expand(_grid(), "s")
    assert grid_hash(eps) == HASH_BEFORE_DECIDE_AT
    assert all("decide_at" not in e.as_dict() and episode_config(e).decide_at == "close" for e in eps)


def test_at_the_open_every_episode_decides_at_the_open_and_the_hash_says_so():
    eps = expand(_grid(decide_at="open"), "s")
    assert {e.decide_at for e in eps} == {"open"}
    assert all(episode_config(e).decide_at == "open" for e in eps)
    assert all(Episode.from_dict(e.as_dict()) == e for e in eps)  # what a worker gets back is the same episode
    assert grid_hash(eps) != HASH_BEFORE_DECIDE_AT
    assert [e.episode_id for e in eps] == [e.episode_id for e in expand(_grid(), "s")]


def test_an_override_set_may_decide_at_the_open_for_its_configuration_only():
    eps = expand(_grid(overrides=[{"label": "close"}, {"label": "open", "decide_at": "open"}]), "s")
    assert {e.override_label: e.decide_at for e in eps} == {"close": "close", "open": "open"}
    assert all(episode_config(e).decide_at == e.decide_at for e in eps)
