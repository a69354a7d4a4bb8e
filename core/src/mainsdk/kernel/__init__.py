"""The cell kernel: a supervisor and the interpreter it runs cells in, in the box (standard library only).

This package runs in the box; the app imports only ``protocol`` (the constants both sides read) and reads the files'
text to send them. Delivery (``mainsdk.kernel_start``): the driver's ordinary exec runs ``python3 -I -u -c
<loader.py>``, the loader's text alone on the command line (a few KiB, far under the box's argument limits), and its
stdin, which only the app writes (``Command.input``), brings a random token (the first line), then the package
itself (``loader.py`` says how: a header line with its size and SHA-256, then that many bytes, checked), then the
start line. The loader makes the package importable as ``mainsdk_kernel`` from memory (nothing is written to the
box's disk, and nothing in the box can supply a module of it) and runs ``supervisor.main``. The same stdin then
stays open: every cell request comes on it, one JSON object per line (``{"code", "timeout", "grace",
"max_results"}``, and optionally ``"env"``, the cell's own variables over the session's, restored after it, and
``"pip_index": true`` when ``%pip`` may reach the package index), and nothing else writes there.

Two processes. The SUPERVISOR (this command) makes itself undumpable first (``prctl(PR_SET_DUMPABLE, 0)``), so no
other process of the box's uid can read its memory or open its descriptors through ``/proc``, then reads the token,
then the start line (one JSON object: ``{"language", "cwd", "site"}``, the interpreter to run, its folder, and the
folders of the kernel's own packages), and starts the EXECUTOR with fork+exec: a fresh interpreter that never held
the token, its stdin ``/dev/null``, its stdout and stderr the supervisor's own (a cell's output streams live), and a
private pipe pair: R brings it each cell, W takes each cell's result (one JSON line). The executor runs cells in its
main thread and, between cells, waits in ``read(R)``.

The start line's language picks the executor (``supervisor.executor_argv``). Each gets its code on a descriptor of a
private in-memory file (``memfd``) the supervisor wrote, never on its command line. ``python``: the loader again,
``python3 -I -u -c <loader.py> executor <sha256> <fd> R W <start>``, which reads the package from the fd and runs
``executor.main``. ``javascript`` and ``typescript``: ``node --expose-internals -e <a line that runs the fd's code>
<fd> R W <language> <constants> <site...>`` (``node_executor.js``); ``bash``: ``bash --noprofile --norc -c 'source
/dev/fd/$3' mainsdk-bash R W <fd>`` (``bash_executor.sh``); each file's header says how it runs a cell. Those two
are forked in a process group of their own with a parent-death SIGKILL, so the timeout's SIGINT reaches the cell's
foreground job too (a ``sleep`` in bash, a child a JS cell waits on synchronously). Bash reads its requests as one
line of escaped fields (``_request_line``), having no JSON parser; every executor writes the same JSON result line,
and every guarantee below holds the same for each: the program is found on the box's ``PATH``, and a box without it
ends the kernel with 125 and a message naming it.

The end of a cell is the supervisor's own observation, never the executor's word: after a result line has come, the
cell is over only once ``/proc/<executor>/task/<waiter>/syscall`` shows the executor's waiter (the thread that reads
requests: the main thread of Python and bash, a worker thread of node's own) blocked in ``read`` on R with the whole
signature measured before any cell ran (for Python and bash the stack and instruction pointers too: a handler or a
trap a cell left that reads R runs nested, deeper), the waiter's ``rchar`` grown since the request was written (it,
not another thread, took the request: at the timeout, a waiter that never read is answered ``"not_run": true``), and
the request pipe empty (``watch.py``). A request is written only once
the waiter is at that wait; ``IDLE_WAIT`` without, and the cell is answered ``"not_run": true``, its code never
sent. A thread a cell left behind can write lines on W, but while the waiter is not back they end nothing. The
display lines of a cell count against the bound of its results: past it none goes on, the executor gets SIGINT as
at the timeout, and the frame says ``"stop": "output"``. Where the box
refuses a parent those ``/proc`` files (Yama's ptrace_scope 2 or 3) the supervisor falls back to a probe: it
writes one NUL byte on R, and the cell is over once that byte was taken, which the executor's code does only when it
waits for its next request again (weaker: a thread the cell left reading R would take it too). The frame says which
(``"watch": "syscall"`` or ``"probe"``). Then the supervisor writes ``\\x1e<token>:end\\n`` on stderr and the cell's
frame, ``\\x1e<token>:<json>\\n``, on stdout, so the app knows where the cell's output ends on both streams; the
frame carries the SHA-256 of the code the supervisor received, which the app checks against what it sent. The token
is only ever in the supervisor's memory.

Display outputs come live: the executor writes each one (``display()``, a figure, the final expression's result, all
its MIME forms) on W as it is made, ``{"cell", "display", "results"}``, and the supervisor sends it on at once as a
frame of its own, ``\\x1e<token>:{"cell", "display", "results"}\\n`` on stdout (never with ``code_sha256``: the app
never takes one for the cell's end), for ``on_result``. The end frame still holds every result; each item says its
output (``"display"``, an index) and whether it is the final expression's (``"main"``).

The executor runs cells through IPython's ``InteractiveShell`` when it can import IPython (the driver's kernel
package set, ``site`` in the start line, after the user's site-packages): IPython's input transformers, magics,
``!cmd``, display formatter and traceback text. Without IPython it runs plain Python (statements, then the final
expression's ``repr`` and ``_repr_*_`` forms).

Time: at a cell's timeout the supervisor sends the executor SIGINT (KeyboardInterrupt, the state survives; in node
an "Interrupted" error, in bash the status 130, with the same caveats each file states; the frame says ``"stop":
"timeout"``); ``grace`` seconds later, if the cell has not ended, it kills the executor and exits with status 124.
An executor that dies (a crash, ``os._exit``, a kill at a limit) ends the supervisor the same way (its exit status
or signal). The app kills the whole command a little later still, should even the supervisor be stuck.

What this does not change: a cell owns its interpreter. Its code can rewrite the executor (the loop, the result it
reports, later cells' code) and print into later cells' output; only the end of a cell, its code's hash and the
frames are out of its reach.
"""
