import sys, torch
sys.path.insert(0, '.')
import reference, submission
from tests.cases import task_cases
cases = task_cases("benchmarks")
which = [int(x) for x in sys.argv[1:]] or [0, 2]
for i in which:
    data = reference.generate_input(**cases[i].args())
    for _ in range(3):
        submission.custom_kernel(data)
    torch.cuda.synchronize()
print("done")
