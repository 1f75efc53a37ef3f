# Sourced by the example tests: installs the build ($build) into $work/prefix, copies the installed
# example named $1 (share/doc/wt/examples/$1, as a user without the source tree has it) to
# $work/source and builds it there against that prefix alone, into $work/build.
prefix=$work/prefix
cmake --install "$build" --prefix "$prefix" >/dev/null
example=$prefix/share/doc/wt/examples/$1
[[ -f $example/CMakeLists.txt ]] || { echo "the example is not installed in $example"; exit 1; }
cp -r "$example" "$work/source"
cmake -S "$work/source" -B "$work/build" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$work/build" >/dev/null
