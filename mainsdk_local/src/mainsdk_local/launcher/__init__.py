"""The launcher: the standard-library-only side of the local driver, run as its own process.

Everything in this package runs in the launcher server (``python -I -S launcher/__main__.py``), a
single-threaded process that forks every box and run; nothing here imports outside the standard library,
and every module imports its siblings relatively, so the same files serve the server process (where the
package is loaded as ``launcher`` from its folder) and the app's type checks and tests (where it is
``mainsdk_local.launcher``). The app talks to it only through ``mainsdk_local.launcher_client`` over the
frames of ``protocol``.

Which module runs where:

- in the server process: ``server`` (the event loop: boxes' channels, deadlines, collection slices),
  ``execs`` (starting, feeding, killing and reporting runs), ``spares`` (workers prepared ahead),
  ``server_setup``, ``boxes`` (box folders, file transfer), ``rootfs`` (root templates), ``cgroups``,
  ``weak``;
- in a run's forked stages B and C, until ``execve``: ``stages``, ``seccomp``, ``landlock``, ``linux``;
- shared by every side: ``common`` (constants), ``protocol`` (the wire format), ``runs`` (what the server
  keeps of a box and its execs), ``node_proxy`` (a preload written into every root).
"""
