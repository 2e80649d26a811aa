"""Reading user files into models, with errors that name the file, the field and the line."""

from ray_bench.config.loader import load_accounts, load_model_file, load_suite
from ray_bench.config.selection import load_selection
from ray_bench.config.tasks import load_task, task_checksum

__all__ = ["load_accounts", "load_model_file", "load_selection", "load_suite", "load_task", "task_checksum"]
