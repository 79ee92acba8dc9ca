#!/bin/sh
# The layers of src/ (src/README.md): a file includes private headers only
# from its own folder and the folders above it in this order, so core/
# never reaches up into a primitive; and core/ calls no primitive's public
# functions or scripts either. TAP: one case per folder, and that one.
src=${1:-$(dirname "$0")/../../src}
order="base net core sem limiter dq inspect cli"
n=0 failed=0
echo "1..$(($(echo $order | wc -w) + 1))"
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
exit $failed
