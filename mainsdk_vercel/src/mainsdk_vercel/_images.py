"""Which image a sandbox starts from: ``sandbox.vercel.image``, sent as v3's ``image``, or a legacy runtime (v2).

The create request follows the official TypeScript client (github vercel/sandbox at 81d725b7,
``packages/vercel-sandbox/src/api-client/api-client.ts`` ``createSandbox``): a ``runtime`` goes to
``POST /v2/sandboxes``, no runtime to ``POST /v3/sandboxes`` with ``image``. An image is a Vercel Container
Registry reference (``sandbox.ts`` ``image``): ``vercel/sandbox/<name>`` for Vercel's managed images
(``constants.ts`` ``ManagedImage``, ``images/README.md``), while a bare name (``my-repo``, ``my-repo:v1``) is
a repository of the project's own registry. So a legacy runtime's name (``python3.13``) sent as an image names
a repository the project does not have: such a name is sent as the runtime it is.
"""

from __future__ import annotations

# ``constants.ts`` ``RUNTIMES``: the legacy Vercel-managed runtimes (deprecated, "Use `image` instead").
LEGACY_RUNTIMES = frozenset({"node26", "node24", "node22", "python3.13"})
# ``constants.ts`` ``ManagedImage``, each published as ``vercel/sandbox/<name>`` (images/docker-bake.hcl).
MANAGED_IMAGES = ("universal", "python:3.14", "node:24", "node:26", "node:22", "ubuntu", "arch")
DEFAULT_IMAGE = "vercel/sandbox/universal"  # what v3 starts with no image (``sandbox.ts``)
PYTHON_IMAGE = "vercel/sandbox/python:3.14"  # Python 3.14 with pip and uv (images/python/Dockerfile)
# What an error about a missing or too old python3 tells the user to set: an image that has Python 3.14.
NO_PYTHON_ADVICE = f"sandbox.vercel.image: {PYTHON_IMAGE}"


def create_request(image: str | None) -> tuple[str, dict[str, str]]:
    """The create's path and what it names: v3 with ``image`` (none: Vercel's default), or v2 with a ``runtime``."""
    if image is None:
        return "/v3/sandboxes", {}
    if image in LEGACY_RUNTIMES:
        return "/v2/sandboxes", {"runtime": image}
    return "/v3/sandboxes", {"image": image}


def image_problem(image: str | None, runtime: str | None) -> str | None:
    """Why ``sandbox.vercel.image`` and ``runtime`` (its older name) cannot be used as given, or None."""
    if image is not None and runtime is not None:
        return (
            "sandbox.vercel.image and sandbox.vercel.runtime are both set; they are one setting (runtime is its "
            "older name): keep sandbox.vercel.image"
        )
    for name, value in (("image", image), ("runtime", runtime)):
        if value is not None and (not value.strip() or value != value.strip()):
            return f"sandbox.vercel.{name} {value!r} is not an image name; name one, e.g. {PYTHON_IMAGE}"
    return None


def not_found(setting: str, image: str, said: str) -> str:
    """The 0001 for an image Vercel could not find: what a name means, and the managed images' names."""
    managed = ", ".join(f"vercel/sandbox/{name}" for name in MANAGED_IMAGES)
    return (
        f"{setting}: {image} is not an image Vercel has ({said}); a name without vercel/sandbox/ is a repository "
        f"of the project's own registry. Vercel's managed images are {managed}; set e.g. "
        f"{setting}: {PYTHON_IMAGE}"
    )
