# The cell kernel's bash executor (see the kernel package's docstring for the protocol).
#
# The supervisor starts it as `bash --noprofile --norc -c 'source "/dev/fd/$3"' mainsdk-bash <R> <W> <fd>`: bash
# reads this text whole from the sealed in-memory file <fd> (supervisor.py), closes it, and runs it in this shell
# at its top level; its stdin /dev/null,
# its stdout and stderr the supervisor's own, in a process group of its own (a timeout's SIGINT reaches the
# cell's foreground job and this shell), with a parent-death SIGKILL. It never holds the token. Between
# cells it waits in the `read` builtin on R (read(R, ..., 1)): what the supervisor watches.
#
# Requests on R are the supervisor's translation of the JSON request into one line of tab-separated fields,
# each ":" and then its text with "\" as "\\", a newline as "\n" and a tab as "\t" (printf %b undoes exactly
# that; the ":" keeps an empty field from vanishing between two tabs): the cell's number, its code, then name
# and value of each of its env entries. The result on W is the JSON line of the protocol: no results, and for
# a non-zero status the error {"name": "ExitStatus", "value": "<status>"} (130 for a cell the timeout
# interrupted, as a shell reports SIGINT).
#
# A cell runs in this shell (`source` of its text, so `cd`, variables, `declare`d ones too, functions and
# exports persist; its stdin is /dev/null, R and W are closed for it). `exit` ends the shell: the
# interpreter is gone, as a Python one that exited, and the next cell starts a new one; so does what ends a
# script (an error under the cell's own `set -e`, an unset variable under `set -u`). An interrupt: the INT
# trap marks it and sets a DEBUG trap that returns 2 before the cell's next command (extdebug: a simulated
# `return`), which ends every function of the cell and the sourced cell itself; the shell and its state stay.
# No trap runs before a command otherwise, so a cell's `set -x` traces its own commands only (the loop runs
# with xtrace off, the cell's options put back before its next cell's first command).
__mainsdk_R=$1
__mainsdk_W=$2
eval "exec $3<&-" # this text's own file: read already, nothing a cell needs
set -- "$1" "$2" # the cells see R and W as $1 and $2, as a -c script would
__mainsdk_incell=
__mainsdk_interrupted=
__mainsdk_opts=
shopt -s extdebug

__mainsdk_stop() {
  # The DEBUG trap after an interrupt: the cell's next command returns instead; the loop's own commands run.
  if [[ $BASH_COMMAND == __mainsdk_* ]]; then
    trap - DEBUG
    return 0
  fi
  return 2
}

# Only a running cell is interrupted: a SIGINT that lands after it ended must not break the loop.
trap '[[ -z $__mainsdk_incell ]] || { __mainsdk_interrupted=1; trap __mainsdk_stop DEBUG; }' INT

__mainsdk_env() {
  # One entry of the cell's env: the old value saved (set or not), the new one exported for the cell.
  local name value
  printf -v name '%b' "${1:1}"
  printf -v value '%b' "${2:1}"
  if ! [[ $name =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]]; then
    # Not a shell variable's name (and `-v` or `${!name}` would evaluate an array subscript in it): not set.
    printf 'mainsdk: the cell env name %q is not a shell variable name; it is not set in bash\n' "$name" >&2
    return
  fi
  if [[ -v $name ]]; then __mainsdk_saved+=("$name" 1 "${!name}"); else __mainsdk_saved+=("$name" 0 ""); fi
  export -- "$name=$value"
}

__mainsdk_resume() {
  # The cell's first command: the shell options the previous cells left (xtrace, verbose) back on.
  [[ $__mainsdk_opts != *x* ]] || set -x
  [[ $__mainsdk_opts != *v* ]] || set -v
}

__mainsdk_end() {
  # Called with stderr on /dev/null: none of this is traced into the cell's output.
  local status=$1 number=$2 error=null
  __mainsdk_opts=$-
  set +xv
  __mainsdk_incell=
  trap - DEBUG
  shift 2
  while (($# >= 3)); do
    if [[ $2 == 1 ]]; then export -- "$1=$3"; else unset -v -- "$1"; fi
    shift 3
  done
  [[ -z $__mainsdk_interrupted ]] || status=130
  __mainsdk_interrupted=
  ((status == 0)) || error="{\"name\": \"ExitStatus\", \"value\": \"$status\", \"traceback\": \"\"}"
  printf '{"cell": %d, "results": [], "results_dropped": 0, "error": %s}\n' "$number" "$error" >&"$__mainsdk_W"
}

# The loop is this script's top level, not a function: a cell's `declare` must make globals, not locals.
printf '{"ready": true}\n' >&"$__mainsdk_W"
while :; do
  IFS= read -r -u "$__mainsdk_R" __mainsdk_line || { (($? > 128)) && continue; exit 0; } # EOF: the supervisor is gone
  IFS=$'\t' read -r -a __mainsdk_fields <<<"$__mainsdk_line"
  # The options come back on the cell's own first line (its line numbers stay), untraced.
  printf -v __mainsdk_code '{ __mainsdk_resume; } 2>/dev/null; %b' "${__mainsdk_fields[1]:1}"
  __mainsdk_saved=()
  for ((__mainsdk_i = 2; __mainsdk_i + 1 < ${#__mainsdk_fields[@]}; __mainsdk_i += 2)); do
    __mainsdk_env "${__mainsdk_fields[__mainsdk_i]}" "${__mainsdk_fields[__mainsdk_i + 1]}"
  done
  __mainsdk_incell=1
  # R and W closed for the cell (bash keeps close-on-exec copies to restore them); fd 9 its text.
  eval "source /dev/fd/9 9<<<\"\$__mainsdk_code\" $__mainsdk_R<&- $__mainsdk_W>&-"
  { __mainsdk_end "$?" "${__mainsdk_fields[0]:1}" "${__mainsdk_saved[@]}"; } 2>/dev/null
done
