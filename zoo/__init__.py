"""zoo: model families (llama, t5, vit) and kinds of training (zoo.tasks) on the shared runtime
(zoo.core); runs are composed, planned and found here. The repo's other folders install into
this namespace too: zoo.core, zoo.eval, zoo.benchmarks, zoo.tools."""
