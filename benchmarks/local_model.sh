#!/usr/bin/env bash
# A local model for `python -m benchmarks.memory_eval --endpoint ...`: Qwen2.5-Coder-1.5B-Instruct
# (Q4_K_M GGUF, Apache-2.0) served by llama-cpp-python's OpenAI-compatible server.
#
#   bash benchmarks/local_model.sh setup [DIR]              # venv + llama-cpp-python + the GGUF
#   bash benchmarks/local_model.sh serve [DIR] [PORT] [N_CTX]  # http://127.0.0.1:PORT/v1
#
# DIR defaults to ~/.cache/hippobot-localmodel, PORT to 8081, N_CTX to 8192. Requests queue one
# after another (the server's default cancels a running request when another client's arrives).
# llama-cpp-python is compiled from source (about 20 minutes on 2 cores; needs a C/C++
# compiler and cmake). WHEELS=/some/dir uses prebuilt wheels from that directory when they are
# there (a cache only; without it the build runs). GGUF=/path/to/file.gguf uses a file you
# already have instead of downloading it from Hugging Face.
set -euo pipefail
CMD="${1:-}"; DIR="${2:-$HOME/.cache/hippobot-localmodel}"
NAME=qwen2.5-coder-1.5b-instruct-q4_k_m.gguf
URL="https://huggingface.co/Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF/resolve/main/$NAME"
# sha256 of the file the results in docs/evaluation.md were measured with
SHA=cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046
LLAMA='llama-cpp-python[server]==0.3.36'

case "$CMD" in
setup)
  mkdir -p "$DIR"
  [ -x "$DIR/venv/bin/python" ] || python3 -m venv "$DIR/venv"
  if ! "$DIR/venv/bin/python" -c "import llama_cpp.server" 2>/dev/null; then
    FIND=(); [ -n "${WHEELS:-}" ] && [ -d "$WHEELS" ] && FIND=(--find-links "$WHEELS")
    # A portable build (no -march=native): AVX2/FMA/F16C, as on any recent x86-64.
    CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON}" \
      "$DIR/venv/bin/pip" install -q "${FIND[@]}" "$LLAMA"
  fi
  if [ -n "${GGUF:-}" ]; then
    ln -sf "$(realpath "$GGUF")" "$DIR/$NAME"
  elif [ ! -f "$DIR/$NAME" ]; then
    curl -fL --retry 3 -o "$DIR/$NAME.part" "$URL" && mv "$DIR/$NAME.part" "$DIR/$NAME"
  fi
  if ! echo "$SHA  $DIR/$NAME" | sha256sum -c --quiet - 2>/dev/null; then
    echo "warning: $DIR/$NAME has another sha256 than the measured file ($SHA);" \
         "results may differ from docs/evaluation.md" >&2
  fi
  echo "ready: bash $0 serve $DIR"
  ;;
serve)
  PORT="${3:-8081}"; NCTX="${4:-8192}"
  exec "$DIR/venv/bin/python" -m llama_cpp.server --model "$DIR/$NAME" \
    --model_alias qwen2.5-coder-1.5b --host 127.0.0.1 --port "$PORT" --n_ctx "$NCTX" \
    --n_threads "$(nproc)" --n_threads_batch "$(nproc)" --interrupt_requests False
  ;;
*)
  sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
