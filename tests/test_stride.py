import pytest

from dataecho import Echo, Shard
from helpers.checkpoint import assert_restores_everywhere


def test_shares_are_disjoint_and_together_hold_every_item_once():
    shares = [list(Shard(range(23), k, 4)) for k in range(4)]
    assert sorted(x for share in shares for x in share) == list(range(23))
    assert shares[1] == [1, 5, 9, 13, 17, 21]


def test_counts_only_the_items_of_its_share():
    share = Shard(range(10), 2, 3)
    assert [next(share), next(share)] == [2, 5] and share.items_read == 2


def test_restores_at_every_step_also_under_an_echo():
    assert_restores_everywhere(lambda: Shard(iter_again(range(17)), 1, 3))
    assert_restores_everywhere(lambda: Echo(Shard(range(17), 2, 3), 2.5, seed=1))


def test_an_upstream_error_leaves_the_position_on_the_item():
    class Flaky:
        def __init__(self):
            self.fail = True

        def __iter__(self):
            for i in range(6):
                if i == 4 and self.fail:
                    self.fail = False
                    raise OSError("read failed")
                yield i

    stream = Flaky()
    share = Shard(stream, 1, 2)
    assert [next(share), next(share)] == [1, 3]
    with pytest.raises(OSError, match="read failed"):
        next(share)  # skipping item 4 fails
    restored = Shard(stream, 1, 2)
    restored.load_state_dict(share.state_dict())  # taken after the failure
    assert list(restored) == [5]


def test_bad_arguments_name_the_parameter():
    with pytest.raises(ValueError, match=r"shard_index must be in \[0, num_shards=2\), got 2"):
        Shard(range(3), 2, 2)
    with pytest.raises(ValueError, match=r"num_shards must be an int >= 1, got 0"):
        Shard(range(3), 0, 0)


class iter_again:
    def __init__(self, items):
        self.items = list(items)

    def __iter__(self):
        return iter(self.items)
