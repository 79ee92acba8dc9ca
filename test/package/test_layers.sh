#!/bin/sh
# The layers of src/ (src/README.md): a file includes private headers only
# from its own folder and the folders above it in this order, so core/
# never reaches up into a primitive; core/ calls no primitive's public
# functions or scripts either, nor names a primitive's client-wide cap,
# write kind or object kind (each primitive defines its own descriptors:
# core/engine.h, core/guard.h).
# TAP: one case per folder, and those two.
src=${1:-$(dirname "$0")/../../src}
order="base net core sem limiter dq inspect cli"
primitives="sem limiter dq"
n=0 failed=0
echo "1..$(($(echo $order | wc -w) + 2))"
allowed=""
for layer in $order; do
  n=$((n + 1))
  allowed="$allowed $layer"
  bad=$(grep -rHo '#include "[a-z_]*/' "$src/$layer" --include='*.c' --include='*.h' |
    sed 's|^\([^:]*\):#include "\([a-z_]*\)/$|\1 \2|' |
    while read -r file dep; do
      case " $allowed " in *" $dep "*) ;; *) echo "${file#"$src"/} includes $dep/" ;; esac
    done)
  if [ -z "$bad" ]; then
    echo "ok $n - $layer/ includes only $allowed"
  else
    echo "not ok $n - $layer/ reaches a later layer"
    echo "$bad" | sed 's/^/# /'
    failed=1
  fi
done
n=$((n + 1))
calls=$(grep -rnE 'sluice_(sem|limiter|dq|permit)_[a-z_]+\(|sluice__lua_(sem|rl|dq)_' "$src/core")
if [ -z "$calls" ]; then
  echo "ok $n - core/ calls no primitive and runs none of their scripts"
else
  echo "not ok $n - core/ calls into a primitive"
  echo "$calls" | sed 's/^/# /'
  failed=1
fi
n=$((n + 1))
# The option and metrics fields the primitives' descriptors name (an
# offsetof may be split over lines), and enumerators naming a cap, write
# kind or object kind, as core/ had them before the descriptors.
fields=$(for p in $primitives; do find "$src/$p" -name '*.[ch]' -exec cat {} +; done |
  tr '\n' ' ' |
  grep -oE 'offsetof\( *sluice_client_(options|metrics) *, *[a-z_0-9]+ *\)' |
  sed 's/.*, *\([a-z_0-9]*\) *)$/\1/' | sort -u)
pattern='SLUICE__(CAP|WRITE|OBJ)_[A-Z_]+|SLUICE__NCAPS'
for f in $fields; do pattern="$pattern|$f"; done
names=$(grep -rnwE "$pattern" "$src/core")
if [ -z "$names" ]; then
  echo "ok $n - core/ names no primitive's cap, write or object kind ($(echo "$fields" | wc -w) fields)"
else
  echo "not ok $n - core/ names a primitive's cap, write or object kind"
  echo "$names" | sed 's/^/# /'
  failed=1
fi
exit $failed
