"""Chapter 4, naive against cached generation: its experiments, their result records, and the sentences
chosen from them.

    experiments  the functions the notebook calls, each returning a record (check_agreement, time_steps,
                 count_generation_flops, whole_generation; quoted_table, naive_crossovers and
                 exercise_numbers are cost-model arithmetic only)
    records      the records: fields, numbers() for the prose, table(), check() for the last cell
    claims       the sentences chosen from the numbers (naive_gap, gap_by_device); pure Python
"""

from .claims import gap_by_device, naive_gap
from .experiments import (check_agreement, count_generation_flops, exercise_numbers, naive_crossovers, quoted_table,
                          time_steps, whole_generation)
from .records import (Agreement, CrossoverCurve, Crossovers, FlopCheck, Generation, LoopRun, QuotedLoop, QuotedTable,
                      StepSweep)

__all__ = ["Agreement", "CrossoverCurve", "Crossovers", "FlopCheck", "Generation", "LoopRun", "QuotedLoop",
           "QuotedTable", "StepSweep", "check_agreement", "count_generation_flops", "exercise_numbers",
           "gap_by_device", "naive_crossovers", "naive_gap", "quoted_table", "time_steps", "whole_generation"]
