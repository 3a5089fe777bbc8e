# Sourced by the bench/compare_*.sh scripts: their common flags.
#
#   parse_bench_args "$@"
#
# Sets min_bytes, max_bytes, repeats and copy_bytes from --min-bytes, --max-bytes, --repeats
# and --copy-bytes (as `--flag VALUE` or `--flag=VALUE`), keeping the caller's defaults for
# the others; -h/--help prints lines `usage_lines` (sed range, e.g. 2,16) of the calling
# script's header and exits 2, as does an unknown argument.

bench_usage() {
  sed -n "${usage_lines}p" "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

parse_bench_args() {
  while [[ $# -gt 0 ]]; do
    case "$1" in
      --min-bytes) min_bytes="${2:?--min-bytes needs a value}"; shift 2 ;;
      --max-bytes) max_bytes="${2:?--max-bytes needs a value}"; shift 2 ;;
      --repeats) repeats="${2:?--repeats needs a value}"; shift 2 ;;
      --copy-bytes) copy_bytes="${2:?--copy-bytes needs a value}"; shift 2 ;;
      --min-bytes=*) min_bytes="${1#*=}"; shift ;;
      --max-bytes=*) max_bytes="${1#*=}"; shift ;;
      --repeats=*) repeats="${1#*=}"; shift ;;
      --copy-bytes=*) copy_bytes="${1#*=}"; shift ;;
      -h|--help) bench_usage ;;
      *) echo "$(basename "$0"): unknown argument '$1'" >&2; bench_usage ;;
    esac
  done
}
