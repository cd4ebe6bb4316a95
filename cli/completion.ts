/**
 * `gpuckpt completion bash|zsh`: a completion script made from the command
 * line's own definition (commands, their options), so it never lags behind.
 * Process IDs complete from the live control sockets (gpuckpt ps lists the
 * same), paths from the file system.
 */
import type { Command } from 'commander';
import { GpuckptError } from '../controller/base/errors.js';

/** Verbs whose first argument is a process (or a job). */
const TAKE_PID = new Set(['checkpoint', 'suspend', 'resume', 'migrate', 'peek', 'poke']);

function flagsOf(cmd: Command): string[] {
  return cmd.options.flatMap((o) => [o.short, o.long].filter((f): f is string => !!f)).concat('--help');
}

export function completionScript(program: Command, shell: string): string {
  if (shell !== 'bash' && shell !== 'zsh') throw new GpuckptError('BAD_ARGUMENT', `no completion for "${shell}": bash or zsh`);
  const cmds = program.commands.filter((c) => !c.name().startsWith('__'));
  const cases = cmds.map((c) => `    ${c.name()}) opts="${flagsOf(c).join(' ')}"; pids=${TAKE_PID.has(c.name()) ? 1 : 0} ;;`).join('\n');
  const bash = `# gpuckpt completion (${shell}): eval "$(gpuckpt completion ${shell})"
_gpuckpt_pids() {
    local dir="\${GPUCKPT_RUN_DIR:-\${XDG_RUNTIME_DIR:+$XDG_RUNTIME_DIR/gpuckpt}}"
    dir="\${dir:-/tmp/gpuckpt-$(id -u)}"
    local s
    for s in "$dir"/[0-9]*.sock; do [ -e "$s" ] && basename "$s" .sock; done
}
_gpuckpt() {
    local cur=\${COMP_WORDS[COMP_CWORD]} opts pids=0
    if [ "$COMP_CWORD" -eq 1 ]; then
        COMPREPLY=($(compgen -W "${cmds.map((c) => c.name()).join(' ')} --help --version" -- "$cur"))
        return
    fi
    case "\${COMP_WORDS[1]}" in
${cases}
    *) opts="--help" ;;
    esac
    if [[ "$cur" == -* ]]; then
        COMPREPLY=($(compgen -W "$opts" -- "$cur"))
    elif [ "$pids" = 1 ] && [ "$COMP_CWORD" -eq 2 ]; then
        COMPREPLY=($(compgen -W "$(_gpuckpt_pids)" -- "$cur"))
    else
        COMPREPLY=($(compgen -f -- "$cur"))
    fi
}
complete -F _gpuckpt gpuckpt
`;
  return shell === 'zsh' ? `autoload -U +X bashcompinit && bashcompinit\n${bash}` : bash;
}
