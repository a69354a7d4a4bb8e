"""mainsdk-driverkit: what drivers share that core itself never uses.

A driver takes core's contract from ``mainsdk.driver`` (the values that cross it, the ``Driver`` and
``SessionDriver`` protocols, and the errors and helpers a hook needs), its ``@hookimpl`` from
``mainsdk.hookspecs`` and the ``AppConfig`` its factory takes from ``mainsdk.config``. This kit holds the
parts several drivers would otherwise each write, none of them part of the contract, so core stays small
and a driver installs only what it uses:

- :mod:`mainsdk_driverkit.hostbox`: for a driver whose box is a folder on the host (the example driver,
  the third-party driver in the conformance tests): the folder (``HostBox``), a subprocess killed
  whole at its timeout and on cancel (``run_subprocess``), the out folder walked without following links
  (``collect_folder``), a file written under a folder without leaving it (``write_under``).
- :mod:`mainsdk_driverkit.host_tools`: how the host runs a tool for a box (an installer, an interpreter
  probe) so that nothing a box wrote into the app's folder steers it.
- :mod:`mainsdk_driverkit.waits`: a long wait (a package set built or fetched) said on the ``mainsdk`` logger as
  it starts and ends (``long_wait``), which the command line's progress display shows.
- :mod:`mainsdk_driverkit.wheelhouse`: wheels for a remote box's Python, downloaded by the app's own pip
  and cached on the app's side by content (the E2B and Vercel drivers).

Import each from its module; this package itself exports nothing, so importing it loads none of them.
"""
