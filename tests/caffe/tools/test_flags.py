import pytest

from caffe.tools.flags import FLAG_SPECS, FlagError, Flags, flags_help, parse_command_line


@pytest.mark.parametrize(
    "argv",
    [
        ["train", "-solver", "s.prototxt", "-iterations", "7"],
        ["train", "--solver", "s.prototxt", "--iterations", "7"],
        ["train", "-solver=s.prototxt", "-iterations=7"],
        ["train", "--solver=s.prototxt", "--iterations=7"],
        ["-solver", "s.prototxt", "train", "--iterations=7"],  # flags before the command
        ["--iterations", "7", "--solver=s.prototxt", "train"],
    ],
)
def test_every_gflags_spelling(argv):
    line = parse_command_line(argv)
    assert line.positional == ["train"]
    assert line.flags.solver == "s.prototxt"
    assert line.flags.iterations == 7


def test_defaults_are_caffes():
    flags = parse_command_line(["time"]).flags
    assert flags == Flags()
    assert (flags.iterations, flags.level, flags.gpu, flags.phase) == (50, 0, "", "")
    assert (flags.sigint_effect, flags.sighup_effect) == ("stop", "snapshot")
    assert flags.nonfinite_limit == 10  # ours: BVLC trains on through NaN (0 here)
    assert parse_command_line(["train", "--nonfinite_limit=0"]).flags.nonfinite_limit == 0


def test_values_may_start_with_a_dash_or_contain_equals():
    flags = parse_command_line(["test", "--level", "-2", "--weights=a=b.caffemodel"]).flags
    assert flags.level == -2
    assert flags.weights == "a=b.caffemodel"


def test_comma_lists():
    flags = parse_command_line(["train", "--stage=deploy,,fast", "--weights", "a,b"]).flags
    assert flags.stages == ["deploy", "fast"]
    assert flags.weight_files == ["a", "b"]
    assert parse_command_line(["train"]).flags.stages == []


@pytest.mark.parametrize(
    "argv,debug",
    [
        (["--debug"], True),
        (["--debug=false"], False),
        (["--nodebug"], False),
        (["-debug=yes"], True),
        ([], False),
    ],
)
def test_boolean_flag_forms(argv, debug):
    assert parse_command_line(["time", *argv]).flags.debug is debug


def test_double_dash_ends_the_flags():
    line = parse_command_line(["test", "--", "--model"])
    assert line.positional == ["test", "--model"]


def test_help_and_version_are_special():
    assert parse_command_line(["--help"]).special == {"help"}
    assert parse_command_line(["-version", "train"]).special == {"version"}


@pytest.mark.parametrize(
    "argv,message",
    [
        (["train", "--bogus", "1"], "unknown command line flag 'bogus'"),
        (["train", "--nosolver"], "unknown command line flag 'nosolver'"),
        (["train", "--solver"], "flag 'solver' is missing its argument"),
        (["time", "--iterations", "ten"], "illegal value 'ten' specified for int32 flag"),
        (["time", "--iterations=99999999999"], "illegal value '99999999999'"),
        (["time", "--debug=maybe"], "illegal value 'maybe' specified for bool flag 'debug'"),
    ],
)
def test_bad_flags_name_the_flag(argv, message):
    with pytest.raises(FlagError, match=message):
        parse_command_line(argv)


def test_help_lists_every_flag_with_type_and_default():
    text = flags_help()
    for spec in FLAG_SPECS:
        assert f"-{spec.name} (" in text
    assert "type: int32 default: 50" in text
    assert 'type: string default: "stop"' in text
