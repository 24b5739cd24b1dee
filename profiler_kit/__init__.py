"""profiler-kit: glue between workloads, readers/analyses and report renderers."""
