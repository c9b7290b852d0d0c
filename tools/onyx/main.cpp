// The `onyx` command-line program: run a model, describe it, or show its plan.
#include <iostream>

#include "cli.h"

namespace {

constexpr const char* kUsage = R"(usage:
  onyx run MODEL [options]     run a model and print its outputs and timing
  onyx info MODEL              print inputs, outputs, opsets, initializer bytes, op histogram
  onyx plan MODEL [options]    print the memory plan for given input shapes
  onyx generate DIR --prompt TEXT [options]
                               generate text from a language-model folder (onyx generate --help)
  onyx serve DIR [options]     an OpenAI-compatible server for a language-model folder (onyx serve --help)
  onyx tokenize DIR_OR_JSON TEXT | --decode IDS | --lines FILE
                               encode or decode with a Hugging Face tokenizer.json (onyx tokenize --help)

plan options:
  --shape NAME=1x128           shape of input NAME (repeatable); inputs with fixed shapes may be left out
  --dim NAME=N                 size of symbolic dimension NAME, for inputs without --shape
  --json                       print the plan as JSON
  --values N                   list the N largest values (default 10)

run options:
  --input NAME=FILE.npy        feed input NAME from a .npy file (repeatable)
  --input NAME=random          feed input NAME with random values
                               (with no --input at all, every input is random)
  --dim NAME=N                 size of symbolic dimension NAME for random inputs (default 1)
  --seed N                     seed for random inputs (default: drawn at random, printed)
  --repeat N                   run N more times after the first and report timing (default 0);
                               the outputs shown and saved are the last run's
  --save-outputs DIR           write each output as DIR/NAME.npy (NAME made file-system safe)
  --device DEVICE              cpu (default), cuda or cuda:N
  --no-cpu-fallback            on a GPU, fail instead of running a node without a GPU kernel on the CPU
  --intra-op-threads N         threads of the CPU kernels, this one included (default 0: every CPU
                               this process may run on)
  --no-fold                    run nodes computed from constants alone on every run (default: once, at load)
  --no-fuse                    keep exporters' op patterns (decomposed RMSNorm) as they are (default: fused at load)
  --fuse-attention on|off|auto fuse HF's eager attention into one Attention node (auto, the default: yes, and
                               for generation on CUDA only)
  --fuse-linear on|off|auto    products by constant weights as onyx::Linear (weights output-major; Q/K/V and
                               gate/up as one product each) (auto, the default: on CUDA only)
  --fuse-rotary-cache on|off|auto  a layer's rotary embeddings of q and k and its KV-cache writes as one
                               onyx::RotaryCache node (auto, the default: on CUDA only)
  --fuse-rotary-attention on|off|auto  a RotaryCache writing its cache in place at an index and the
                               Attention reading it as one onyx::RotaryCacheAttention node (auto, the
                               default: on CUDA only)
  --memory-budget BYTES        on a GPU, the session's device-memory budget (default: 90% of free memory)
  --memory-report              print the memory governor's holders after the runs
  --host-memory-budget BYTES   the host memory the session may hold at once (default: 80% of
                               physical memory); an allocation past it fails, naming the value
  --timeout SECONDS            stop each run that takes longer (checked between nodes and
                               between Loop iterations)
  --profile N                  time every node and print, as means over the repeated runs (the first
                               run when --repeat is 0), the time per op type and the N slowest nodes;
                               on a GPU each node waits for the device (no CUDA-graph replays)
  --capture off|auto|require   on a GPU, replay repeated input shapes from CUDA graphs (default off)
  --validate-replays           check staged bytes and poison the arena before each replay (slower)
  --json                       print one JSON object: outputs, timings, plan, capture report
  --device-inputs              on a GPU, copy the inputs to the device once, before the runs
  --keep-on-device all|NAME,.. on a GPU, leave these outputs on the device (copied to the host
                               only to print them, after the runs)
  --memory planned|release|keep
                               planned (default): one arena per input-shape signature, every
                               intermediate at a planned offset; release: allocate each value
                               when produced and free it after its last reader; keep: keep every
                               intermediate until the run ends (debugging)
)";

}  // namespace

int main(int argc, char** argv) {
  using onyx::cli::UsageError;
  std::vector<std::string> args(argv + 1, argv + argc);
  try {
    if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
      std::cout << kUsage;
      return args.empty() ? 2 : 0;
    }
    if (args[0] == "generate") return onyx::cli::cmd_generate(std::vector<std::string>(args.begin() + 1, args.end()));
    if (args[0] == "serve") return onyx::cli::cmd_serve(std::vector<std::string>(args.begin() + 1, args.end()));
    if (args[0] == "tokenize") return onyx::cli::cmd_tokenize(std::vector<std::string>(args.begin() + 1, args.end()));
    if (args.size() < 2) throw UsageError(onyx::cat("'", args[0], "' needs a MODEL path"));
    std::vector<std::string> rest(args.begin() + 2, args.end());
    if (args[0] == "run") return onyx::cli::cmd_run(args[1], rest);
    if (args[0] == "plan") return onyx::cli::cmd_plan(args[1], rest);
    if (args[0] == "info") return onyx::cli::cmd_info(args[1], rest);
    throw UsageError(onyx::cat("unknown command '", args[0], "'"));
  } catch (const UsageError& e) {
    std::cerr << "onyx: " << e.what() << "\n\n" << kUsage;
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "onyx: error: " << e.what() << "\n";
    return 1;
  }
}
