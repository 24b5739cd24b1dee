from profiler_kit.cli import cli

cli(prog_name="profiler-kit")
