"""tools.step_profile on CPU: its arguments and how it names the profiled kernels (the profile itself is GPU-only)."""
import pytest

from tools.step_profile import parse_args, step_kernel_medians


def test_step_kernel_medians_names_each_kernel_by_step_and_role():
    roles = [["ws"], ["prep", "main"]]
    times = [1.0, 10.0, 20.0,   3.0, 12.0, 22.0,   2.0, 11.0, 90.0]     # three decodes in launch order
    assert step_kernel_medians(times, roles, 3) == {(0, "ws"): 2.0, (1, "prep"): 11.0, (1, "main"): 22.0}
    with pytest.raises(ValueError, match="8 OneLA kernels profiled, expected 3 decodes x 3"):
        step_kernel_medians(times[:8], roles, 3)


@pytest.mark.parametrize("argv,msg", [(["--O", "1"], "--O must be >= 2"), (["--config", "{x"], "is not JSON"),
                                      (["--config", '{"tiles": 1}'], "unknown launch config key(s) ['tiles']"),
                                      (["--graph", "-1"], "--graph must be >= 0")])
def test_step_profile_refuses_bad_arguments_naming_them(argv, msg, capsys):
    with pytest.raises(SystemExit):
        parse_args(argv)
    assert msg in capsys.readouterr().err
