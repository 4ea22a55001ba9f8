# Sourced by scripts/demo and scripts/test: installs what patchwright needs to
# build and run, once. Idempotent and quick when everything is there.

# Installs the Debian packages named that are not installed yet (apt-get,
# through sudo unless root); nothing when all are there.
apt_install_missing() {
    local missing=()
    for pkg in "$@"; do
        dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
    done
    [ ${#missing[@]} -gt 0 ] || return 0
    echo "installing: ${missing[*]}" >&2
    local sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
}

# System packages: bubblewrap (the sandbox), cmake + clang + libclang (the
# llama.cpp build and its bindgen), git (workspaces), pip (model downloads),
# and the Debian packages named, in one apt call.
ensure_system_packages() {
    local pip=()
    python3 -m pip --version >/dev/null 2>&1 || pip=(python3-pip)
    apt_install_missing bubblewrap cmake clang libclang-dev git "${pip[@]}" "$@"
    command -v cargo >/dev/null || {
        echo "cargo not found: install Rust (https://rustup.rs) and retry" >&2
        exit 1
    }
}

# Builds the release binary (the test suite uses the same profile, so
# llama.cpp is compiled once for both).
build_release() {
    cargo build --release --locked --bin patchwright
}

PATCHWRIGHT="${CARGO_TARGET_DIR:-target}/release/patchwright"

# Models are fetched into the binary's models directory:
# $PATCHWRIGHT_MODELS_DIR when set, else $XDG_DATA_HOME/patchwright/models,
# else ~/.local/share/patchwright/models (one copy for every checkout and
# the installed binary). These scripts export nothing, so `models fetch` and
# the runs after it agree. Checkouts from before kept them in models/: say
# how to use those instead of downloading again.
note_repo_models() {
    if [ -z "${PATCHWRIGHT_MODELS_DIR:-}" ] && compgen -G 'models/*.gguf' >/dev/null; then
        echo "note: models/*.gguf in this checkout are no longer used (models live in" \
            "\${XDG_DATA_HOME:-~/.local/share}/patchwright/models);" \
            "export PATCHWRIGHT_MODELS_DIR=$PWD/models to keep using them" >&2
    fi
}

# The virtualenv with pytest that the demo repositories' tests run in
# (bound read-only into the sandbox): $DEMO_VENV, default
# ${CARGO_TARGET_DIR:-target}/demo-venv, made once. Exports DEMO_VENV as an
# absolute path, so scripts/make-demo-repos uses the same one.
ensure_demo_venv() {
    local venv="${DEMO_VENV:-${CARGO_TARGET_DIR:-target}/demo-venv}"
    case "$venv" in /*) ;; *) venv="$PWD/$venv" ;; esac
    if ! "$venv/bin/python" -c 'import pytest' >/dev/null 2>&1; then
        echo "creating $venv with pytest" >&2
        python3 -m venv "$venv"
        "$venv/bin/python" -m pip install -q 'pytest>=7'
    fi
    export DEMO_VENV="$venv"
}

# The Vulkan build that tests/it/vulkan.rs runs: Mesa's software Vulkan
# driver (lavapipe, so no GPU is needed), the Vulkan headers, the shader
# compiler and SPIR-V headers llama.cpp's Vulkan backend compiles with, then
# `--features vulkan` in the same target directory as the CPU build: only
# what the feature changes (llama-cpp-sys-2, llama-cpp-2, patchwright) is
# compiled again, beside the CPU build's artifacts (cargo keys them by
# features); every other crate is shared. The binary is copied to
# ${CARGO_TARGET_DIR:-target}/vulkan/patchwright, and the CPU binary is put
# back in release/ (a relink at most). Exports PATCHWRIGHT_TEST_VULKAN_BIN,
# the copy's absolute path.
ensure_vulkan_build() {
    apt_install_missing mesa-vulkan-drivers libvulkan-dev glslc spirv-headers
    local target="${CARGO_TARGET_DIR:-target}"
    case "$target" in /*) ;; *) target="$PWD/$target" ;; esac
    # Headers older than VK_EXT_layer_settings (Debian bookworm's): the
    # missing types from scripts/vulkan-shim (see the header's comment),
    # searched before /usr/include through CXXFLAGS, which cc-rs hands to
    # llama.cpp's CMake build. Of every build script in the graph only
    # llama-cpp-sys-2's tracks CXXFLAGS, and its Vulkan build is its own
    # unit; CPLUS_INCLUDE_PATH would do too, but every cc-rs build script
    # (ring, wasmtime, tree-sitter) tracks that one, so each switch between
    # the two configurations would compile them and all above them again.
    local cxxflags="${CXXFLAGS:-}"
    if ! grep -q LayerSettingEXT /usr/include/vulkan/vulkan_structs.hpp 2>/dev/null; then
        cxxflags="${cxxflags:+$cxxflags }-I$PWD/scripts/vulkan-shim"
    fi
    CXXFLAGS="$cxxflags" cargo build --release --locked --features vulkan --bin patchwright
    mkdir -p "$target/vulkan"
    cp -f "$target/release/patchwright" "$target/vulkan/patchwright.new"
    mv -f "$target/vulkan/patchwright.new" "$target/vulkan/patchwright"
    build_release
    export PATCHWRIGHT_TEST_VULKAN_BIN="$target/vulkan/patchwright"
}

# Phase timing for scripts/test: `phase NAME CMD...` runs CMD in this shell
# (its exports stay) and records its wall time; print_phases prints the
# table, marking a phase that did not finish. Times are wall seconds on
# this machine, measured with bash's EPOCHREALTIME.
PHASE_NAMES=()
PHASE_SECS=()
PHASE_CURRENT=""
PHASE_T0=0
SCRIPT_T0="${EPOCHREALTIME/./}"

# Seconds since $1 (microseconds), with one decimal.
seconds_since() {
    local us=$(( ${EPOCHREALTIME/./} - $1 ))
    printf '%d.%d' $(( us / 1000000 )) $(( (us % 1000000) / 100000 ))
}

phase() {
    local name=$1
    shift
    PHASE_CURRENT=$name
    PHASE_T0="${EPOCHREALTIME/./}"
    echo "== phase: $name" >&2
    "$@"
    PHASE_NAMES+=("$name")
    PHASE_SECS+=("$(seconds_since "$PHASE_T0")")
    PHASE_CURRENT=""
}

print_phases() {
    local i
    {
        echo
        echo "Where the time went (wall seconds):"
        printf '  %8s  %s\n' seconds phase
        for i in "${!PHASE_NAMES[@]}"; do
            printf '  %8s  %s\n' "${PHASE_SECS[$i]}" "${PHASE_NAMES[$i]}"
        done
        if [ -n "$PHASE_CURRENT" ]; then
            printf '  %8s  %s (did not finish)\n' "$(seconds_since "$PHASE_T0")" "$PHASE_CURRENT"
        fi
        printf '  %8s  %s\n' "$(seconds_since "$SCRIPT_T0")" total
    } >&2
}
