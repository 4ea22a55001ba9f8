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
# llama.cpp build and its bindgen), git (workspaces), pip (model downloads).
ensure_system_packages() {
    local pip=()
    python3 -m pip --version >/dev/null 2>&1 || pip=(python3-pip)
    apt_install_missing bubblewrap cmake clang libclang-dev git "${pip[@]}"
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
# `--features vulkan` into ${CARGO_TARGET_DIR:-target}/vulkan (its own
# llama.cpp build: ~25 minutes on 2 cores the first time, seconds after).
# Exports PATCHWRIGHT_TEST_VULKAN_BIN, the binary's absolute path.
ensure_vulkan_build() {
    apt_install_missing mesa-vulkan-drivers libvulkan-dev glslc spirv-headers
    local dir="${CARGO_TARGET_DIR:-target}/vulkan"
    case "$dir" in /*) ;; *) dir="$PWD/$dir" ;; esac
    # Headers older than VK_EXT_layer_settings (Debian bookworm's): the
    # missing types from scripts/vulkan-shim (see the header's comment),
    # searched before /usr/include through the compiler's environment (the
    # llama.cpp build caches its flags, this stays out of them).
    local shim="${CPLUS_INCLUDE_PATH:-}"
    if ! grep -q LayerSettingEXT /usr/include/vulkan/vulkan_structs.hpp 2>/dev/null; then
        shim="$PWD/scripts/vulkan-shim${shim:+:$shim}"
    fi
    CPLUS_INCLUDE_PATH="$shim" cargo build --release --locked --features vulkan --bin patchwright --target-dir "$dir"
    export PATCHWRIGHT_TEST_VULKAN_BIN="$dir/release/patchwright"
}
