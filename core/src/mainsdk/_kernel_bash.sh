# The cell kernel's bash executor (see _kernel.py's docstring for the protocol).
#
# The supervisor starts it as `bash --noprofile --norc -c <this> mainsdk-bash <R> <W>`, its stdin /dev/null,
# its stdout and stderr the supervisor's own, in a process group of its own (a timeout's SIGINT reaches the
# cell's foreground job and this shell), with a parent-death SIGKILL. It never holds the token. Between
# cells it waits in the `read` builtin on R (read(R, ..., 1)): what the supervisor watches.
#
# Requests on R are the supervisor's translation of the JSON request into one line of tab-separated fields,
# each with "\" as "\\", a newline as "\n" and a tab as "\t" (printf %b undoes exactly that): the cell's
# number, its code, then name and value of each of its env entries. The result on W is the JSON line of the
# protocol: no results, and for a non-zero status the error {"name": "ExitStatus", "value": "<status>"}
# (130 for a cell the timeout interrupted, as a shell reports SIGINT).
#
# A cell runs in this shell (`source` of its text, so `cd`, variables, `declare`d ones too, functions and
# exports persist; its stdin is /dev/null, R and W are closed for it). `exit` ends the shell: the
# interpreter is gone, as a Python one that exited, and the next cell starts a new one. An interrupt: the
# INT trap marks it and the DEBUG trap (extdebug) then returns 2 before the cell's next command, which ends
# every function of the cell and the sourced cell itself; the shell and its state stay.
__mainsdk_R=$1
__mainsdk_W=$2
__mainsdk_int=
__mainsdk_interrupted=
shopt -s extdebug
trap '__mainsdk_int=1 __mainsdk_interrupted=1' INT
trap '[[ $BASH_COMMAND != __mainsdk_* ]] || __mainsdk_int=; [[ -z $__mainsdk_int ]] || return 2 2>/dev/null' DEBUG

__mainsdk_cell() {
  # $1 the cell's code; R and W are closed for it (bash keeps close-on-exec copies to restore them).
  eval "source /dev/fd/9 9<<<\"\$1\" $__mainsdk_R<&- $__mainsdk_W>&-"
}

__mainsdk_serve() {
  local line fields number code i name value status saved
  printf '{"ready": true}\n' >&"$__mainsdk_W"
  while :; do
    IFS= read -r -u "$__mainsdk_R" line || exit 0 # the supervisor is gone
    IFS=$'\t' read -r -a fields <<<"$line"
    number=${fields[0]}
    printf -v code '%b' "${fields[1]}"
    saved=()
    for ((i = 2; i + 1 < ${#fields[@]}; i += 2)); do
      printf -v name '%b' "${fields[i]}"
      printf -v value '%b' "${fields[i + 1]}"
      if [[ -v $name ]]; then saved+=("$name" 1 "${!name}"); else saved+=("$name" 0 ""); fi
      export -- "$name=$value"
    done
    __mainsdk_interrupted=
    __mainsdk_cell "$code"
    __mainsdk_end "$?" "$number" "${saved[@]}"
  done
}

__mainsdk_end() {
  local status=$1 number=$2 error=null
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

__mainsdk_serve
