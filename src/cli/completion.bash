# bash completion for sluice(1): commands, subcommands, options and the
# values of --algo and --redis; after "--" (sem run, dq consume), commands.
#
# Everything is read from the tool's own --help, so the completion stays
# true as the tool grows: usage lines name every command ("sluice sem run
# NAME ..."), and an option followed by a word in capitals takes a value
# ("--ttl MS", "--redis URL"), a list joined by "|" names its choices
# ("--algo fixed|sliding-log|...").

# _sluice_words TOOL [GROUP [COMMAND]]: the commands of the tool, of GROUP,
# or of GROUP's COMMAND ("sluice dq schedule set ...").
_sluice_words() {
  "$1" ${2:+"$2"} --help 2>/dev/null | awk -v group="${2-}" -v cmd="${3-}" '{
    for (i = 1; i < NF; i++) {
      if ($i != "sluice") continue
      w = $(i + 1)
      if (group != "") { if (w != group || i + 2 > NF) continue; w = $(i + 2) }
      if (cmd != "") { if (w != cmd || i + 3 > NF) continue; w = $(i + 3) }
      if (w ~ /^[a-z]+$/) print w
    }
  }' | sort -u
}

# _sluice_options TOOL GROUP: "OPTION VALUE" lines for GROUP's options,
# VALUE being "-" for a flag, "choices:a b c" for a list, else the
# placeholder (MS, URL, ...). The top-level help may name the choices that
# GROUP's help leaves as a placeholder (--algo ALGO).
_sluice_options() {
  { "$1" "$2" --help; echo "--end-of-group--"; "$1" --help; } 2>/dev/null | awk '
    function bare(t) { gsub(/^[[(`]+|[])`,;:.]+$/, "", t); return t }
    $0 == "--end-of-group--" { top = 1; next }
    {
      for (i = 1; i <= NF; i++) {
        o = bare($i)
        if (o !~ /^--?[a-z][a-z-]*$/ || (top && !(o in val))) continue
        v = i < NF ? bare($(i + 1)) : ""
        if (v ~ /^[a-z0-9-]+(\|[a-z0-9-]+)+$/) { gsub(/\|/, " ", v); v = "choices:" v }
        else if (v !~ /^[A-Z][A-Z_]*$/) v = "-"
        # A value seen anywhere wins over a bare mention in the prose.
        if (!(o in val) || val[o] == "-" || v ~ /^choices:/) val[o] = v
      }
    }
    END { for (o in val) print o, val[o] }'
}

_sluice() {
  local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD - 1]}
  local tool=${COMP_WORDS[0]} group=${COMP_WORDS[1]} i
  COMPREPLY=()
  command -v "$tool" >/dev/null 2>&1 || tool=sluice

  # After "--": the command to run, completed as a command line of its own.
  for ((i = 2; i < COMP_CWORD; i++)); do
    if [[ ${COMP_WORDS[i]} == -- ]]; then
      if declare -F _command_offset >/dev/null; then
        _command_offset $((i + 1))
      else
        mapfile -t COMPREPLY < <(compgen -c -- "$cur" | sort -u)
      fi
      return 0
    fi
  done

  if ((COMP_CWORD == 1)); then
    mapfile -t COMPREPLY < <(compgen -W "$(_sluice_words "$tool") --help --version" -- "$cur")
    return 0
  fi
  local subs
  subs=$(_sluice_words "$tool" "$group")
  if ((COMP_CWORD == 2)) && [[ -n $subs && $cur != -* ]]; then
    mapfile -t COMPREPLY < <(compgen -W "$subs" -- "$cur")
    return 0
  fi

  if ((COMP_CWORD == 3)) && [[ $cur != -* ]]; then
    subs=$(_sluice_words "$tool" "$group" "${COMP_WORDS[2]}")
    if [[ -n $subs ]]; then
      mapfile -t COMPREPLY < <(compgen -W "$subs" -- "$cur")
      return 0
    fi
  fi

  local options value
  options=$(_sluice_options "$tool" "$group")
  value=$(awk -v o="$prev" '$1 == o { sub(/^[^ ]+ /, ""); print }' <<<"$options")
  case $value in
    choices:*)
      mapfile -t COMPREPLY < <(compgen -W "${value#choices:}" -- "$cur")
      return 0 ;;
    URL)
      compopt -o nospace 2>/dev/null
      mapfile -t COMPREPLY < <(compgen -W "redis:// rediss:// redis+sentinel:// \
        redis+cluster:// unix://" -- "$cur")
      return 0 ;;
    [A-Z]*) return 0 ;;  # a number, a name, an id: nothing to offer
  esac
  if [[ $cur == -* ]]; then
    mapfile -t COMPREPLY < <(compgen -W "$(cut -d' ' -f1 <<<"$options") --help" -- "$cur")
  fi
  return 0
}
complete -F _sluice sluice
