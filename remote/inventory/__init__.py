"""inventory.yaml → a typed, resolved model: its keys and what they resolve to (model), host ranges
(ranges), the file read and checked (load), every mistake named with its file:line (errors)."""

from ddptui.remote.inventory.errors import InventoryError
from ddptui.remote.inventory.load import env_text, load, parse, with_sync
from ddptui.remote.inventory.model import (
    NOTIFY_DEFAULT,
    Container,
    ContainerFields,
    Host,
    Inventory,
    Job,
    Nccl,
    Notify,
    NotifyEvent,
    RestartCause,
    Slurm,
    SpawnArgs,
    Sync,
    leave_out,
    numbered,
    swap_in,
    with_nodes,
)
from ddptui.remote.inventory.ranges import without

__all__ = [
    "NOTIFY_DEFAULT",
    "Container",
    "ContainerFields",
    "Host",
    "Inventory",
    "InventoryError",
    "Job",
    "Nccl",
    "Notify",
    "NotifyEvent",
    "RestartCause",
    "Slurm",
    "SpawnArgs",
    "Sync",
    "env_text",
    "leave_out",
    "load",
    "numbered",
    "parse",
    "swap_in",
    "with_nodes",
    "with_sync",
    "without",
]
