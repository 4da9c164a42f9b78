"""Every argument error names the parameter, the rule, the value and the fix."""

import math

import pytest

from dataecho import Batch, Echo, Map, Shuffle, Source, pipeline


@pytest.mark.parametrize(
    ("factor", "error", "message"),
    [
        (0.5, ValueError, r"factor must be >= 1 .* got 0.5; pass factor=1 for no echoing"),
        (0, ValueError, r"factor must be >= 1 .* got 0.0"),
        (-2, ValueError, r"factor must be >= 1 .* got -2.0"),
        (math.nan, ValueError, r"factor must be finite and >= 1, got nan; pass a number"),
        (math.inf, ValueError, r"factor must be finite and >= 1, got inf"),
        ("2", TypeError, r"factor must be a real number >= 1 .* got '2' of type str"),
        (None, TypeError, r"factor must be a real number >= 1 .* got None of type NoneType"),
        (True, TypeError, r"factor must be a real number >= 1 .* got True of type bool"),
    ],
)
def test_bad_factor_is_rejected_with_a_clear_message(factor, error, message):
    with pytest.raises(error, match=message):
        Echo([1], factor)


@pytest.mark.parametrize(
    ("size", "error", "message"),
    [
        (0, ValueError, r"buffer_size must be an int >= 1, got 0; pass buffer_size=1 or more"),
        (-3, ValueError, r"buffer_size must be an int >= 1, got -3"),
        (2.5, TypeError, r"buffer_size must be an int >= 1, got 2.5 of type float"),
        ("10", TypeError, r"buffer_size must be an int >= 1, got '10' of type str"),
    ],
)
def test_bad_buffer_size_is_rejected(size, error, message):
    with pytest.raises(error, match=message):
        Shuffle([1], size)


@pytest.mark.parametrize(("size", "error"), [(0, ValueError), (-1, ValueError), (1.0, TypeError)])
def test_bad_batch_size_is_rejected(size, error):
    with pytest.raises(error, match=r"batch_size must be an int >= 1, got"):
        Batch([1], size)


def test_empty_data_set_is_rejected():
    with pytest.raises(ValueError, match=r"data is empty \(len\(data\) == 0\); pass a data set"):
        Source([])


def test_empty_data_set_is_rejected_by_the_pipeline_builder():
    with pytest.raises(ValueError, match=r"data is empty"):
        pipeline([], echo="batch")


def test_non_iterable_upstream_is_rejected():
    with pytest.raises(TypeError, match=r"upstream must be iterable .* got int; wrap a single"):
        Echo(3, 2)


def test_non_sequence_data_is_rejected_by_source():
    with pytest.raises(TypeError, match=r"data must be a map-style data set .* got generator"):
        Source(x for x in range(3))


def test_bad_seed_is_rejected():
    with pytest.raises(ValueError, match=r"seed must be an int in \[0, 2\*\*63\), got -1"):
        Echo([1], 2, seed=-1)
    with pytest.raises(TypeError, match=r"seed must be an int .* got 1.5 of type float"):
        Echo([1], 2, seed=1.5)


def test_bad_shard_index_is_rejected():
    with pytest.raises(ValueError, match=r"shard_index must be in \[0, num_shards=2\), got 2"):
        Source(range(10), shard_index=2, num_shards=2)


def test_too_many_shards_is_rejected():
    with pytest.raises(ValueError, match=r"too few for num_shards=8: shard 5 would be empty"):
        Source(range(4), shard_index=5, num_shards=8)


def test_unknown_variant_is_rejected():
    with pytest.raises(ValueError, match=r"echo must be one of .* got 'examples'"):
        pipeline([1, 2], echo="examples")


def test_non_callable_map_fn_is_rejected():
    with pytest.raises(TypeError, match=r"fn must be callable as fn\(item\) or fn\(item, rng\), "
                                        r"got 3 of type int; pass a function$"):
        Map([1], 3)


def test_non_callable_collate_is_rejected():
    with pytest.raises(TypeError, match=r"collate must be callable .* got 'stack' of type str"):
        Batch([1], 2, collate="stack")


def test_state_from_another_stage_type_is_rejected():
    state = Shuffle([1, 2], 2).state_dict()
    with pytest.raises(ValueError, match=r"saved from a 'Shuffle' stage but is being loaded "
                                         r"into a 'Echo' stage"):
        Echo([1, 2], 2).load_state_dict(state)


def test_state_with_other_parameters_is_rejected():
    state = Echo([1, 2], 2).state_dict()
    with pytest.raises(ValueError, match=r"saved with other parameters: factor \(saved 2.0, "
                                         r"here 3.0\)"):
        Echo([1, 2], 3).load_state_dict(state)


def test_state_from_another_version_is_rejected():
    state = {**Echo([1, 2], 2).state_dict(), "version": 99}
    with pytest.raises(ValueError, match=r"has version 99 but this dataecho expects version 1"):
        Echo([1, 2], 2).load_state_dict(state)


def test_state_that_is_not_a_dict_is_rejected():
    with pytest.raises(TypeError, match=r"state must be a dict returned by Echo.state_dict\(\)"):
        Echo([1], 2).load_state_dict([1, 2])


def test_upstream_error_reaches_the_caller_with_its_type_and_traceback():
    def broken():
        yield 1
        raise KeyError("disk failed")

    stage = Shuffle(Echo(broken(), 2), 4)
    with pytest.raises(KeyError, match="disk failed") as info:
        list(stage)
    assert any(entry.name == "broken" for entry in info.traceback)


def test_one_shot_iterator_cannot_be_rewound():
    it = iter([1, 2, 3])
    stage = Echo(it, 2)
    state = stage.state_dict()
    next(stage)
    with pytest.raises(ValueError, match=r"one-shot iterator .* already read; rebuild"):
        stage.load_state_dict(state)


def test_one_shot_iterator_cannot_be_rewound_after_close_either():
    from dataecho.readers import IterableSource
    stage = IterableSource(iter(range(20)))
    for _ in range(5):
        next(stage)
    state = stage.state_dict()
    for _ in range(3):
        next(stage)
    stage.close()  # drops the iterator, but the one-shot source is still spent
    with pytest.raises(ValueError, match=r"one-shot iterator .* already read; rebuild"):
        stage.load_state_dict(state)


@pytest.mark.parametrize(("make", "name"), [
    (lambda v: Source(range(4), shuffle=v), "shuffle"),
    (lambda v: Source(range(4), drop_remainder=v), "drop_remainder"),
    (lambda v: Batch([1], 2, drop_last=v), "drop_last"),
    (lambda v: Map([1], abs, random=v), "random"),
])
def test_a_flag_that_is_not_a_bool_is_rejected(make, name):
    with pytest.raises(TypeError, match=rf"^{name} must be True or False, got 'False' of type "
                                        rf"str; pass {name}=True or {name}=False$"):
        make("False")
    with pytest.raises(TypeError, match=rf"^{name} must be True or False, got 1 of type int"):
        make(1)


def test_a_numpy_bool_is_accepted_as_a_flag():
    import numpy as np
    assert Source(range(4), shuffle=np.bool_(False)).shuffle is False


def test_check_callable_names_the_parameter_the_call_and_the_fix():
    from dataecho._checks import check_callable
    assert check_callable(None, "collate", "collate(items)") is None
    assert check_callable(len, "collate", "collate(items)") is len
    with pytest.raises(TypeError, match=r"^collate must be callable as collate\(items\), or None, "
                                        r"got 'stack' of type str; pass a function$"):
        check_callable("stack", "collate", "collate(items)")
    with pytest.raises(TypeError, match=r"^fn must be callable as fn\(item\), got None of type "
                                        r"NoneType; pass a function such as abs$"):
        check_callable(None, "fn", "fn(item)", "pass a function such as abs", optional=False)


def test_non_callable_augment_is_rejected_under_its_name():
    from dataecho._checks import check_augment
    with pytest.raises(TypeError, match=r"^augment must be callable as augment\(example\) or "
                                        r"augment\(example, rng\), or None, got 'flip' of type "
                                        r"str; pass a function, or None for no augmentation$"):
        check_augment("flip")


@pytest.mark.parametrize("interrupt", [KeyboardInterrupt, SystemExit])
def test_an_interrupted_generator_is_not_read_as_the_end_of_the_data(interrupt):
    # Fails on 8beab11: Ctrl-C inside a read, then the same loop again, ended the stream
    # silently after the items read so far.
    def reads():
        yield 1
        raise interrupt()
        yield 2  # never reached

    stage = Echo(reads(), 2)
    assert [next(stage), next(stage)] == [1, 1]
    with pytest.raises(interrupt):
        next(stage)
    with pytest.raises(RuntimeError, match=rf"raised {interrupt.__name__}.* a generator cannot "
                                           "go on"):
        next(stage)


def test_a_generator_that_raised_is_not_read_as_the_end_of_the_data():
    # Fails on the code before this test: the next call ended the stream silently.
    def reads():
        yield 1
        raise OSError("transient read error")
        yield 2  # never reached: a generator that raised is finished

    stage = Echo(reads(), 2)
    assert [next(stage), next(stage)] == [1, 1]
    with pytest.raises(OSError, match="transient read error"):
        next(stage)
    with pytest.raises(RuntimeError, match=r"generator \(generator\) raised OSError: transient "
                                           r"read error and a generator cannot go on"):
        next(stage)
