"""Shard.cycle: how many distinct records a rank reads before it repeats one (the rule the
data layers' batch-larger-than-source warning uses), checked against a brute-force walk."""

import pytest

from caffe.data.shard import Shard


def first_repeat(shard: Shard, records: int) -> int:
    """Records this rank reads before it meets one again, walking its running offsets."""
    seen = []
    offset = 0
    while True:
        if shard.keeps(offset):
            if offset % records in seen:
                return len(seen)
            seen.append(offset % records)
        offset += 1


@pytest.mark.parametrize("records", [1, 2, 5, 6, 7, 12])
@pytest.mark.parametrize("count", [1, 2, 3, 4])
def test_cycle_matches_a_walk_of_the_offsets(records, count):
    for rank in range(count):
        shard = Shard(rank, count)
        assert shard.cycle(records) == first_repeat(shard, records)
