"""Base images for tests and benchmarks: the library's busybox image (no registry is reachable)."""

from ray_bench.sandboxes.images import (
    BASE_IMAGE,
    build_base_image,
    busybox_path,
    busybox_rootfs_tar,
    image_exists,
    write_task_environment,
)

__all__ = ["BASE_IMAGE", "build_base_image", "busybox_path", "busybox_rootfs_tar", "image_exists",
           "write_task_environment"]
