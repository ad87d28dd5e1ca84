"""The correctness tests catch a kernel path that computes nothing: against a mutant whose
runner never launches (tools/mutation_check.py), every stubbed-kernel test of custom_kernel's
results fails. (The same tool with --gpu checks the GPU tests on a GPU.)"""

from tools import mutation_check


def test_the_mutant_launches_nothing():
    source = (mutation_check.ROOT / "nvfp4_gemm" / "kernel_runner.py").read_text()
    mutant = mutation_check.mutate(source)
    assert "table.launch()" not in mutant and "_checked_launch(config, table)()" not in mutant
    assert mutant.count("self.launches += 1") == source.count("self.launches += 1") >= 2


def test_every_cpu_correctness_test_fails_on_the_mutant(capsys):
    assert mutation_check.main([]) == 0, capsys.readouterr().out
    out = capsys.readouterr().out
    for test in mutation_check.CPU_TESTS:
        name = test.split("::")[1]
        lines = [line for line in out.splitlines() if line.endswith(name) or f"{name}[" in line]
        assert lines and all(line.startswith("failed") for line in lines), (name, lines)
