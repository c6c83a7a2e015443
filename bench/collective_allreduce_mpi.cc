// The MPI baseline of collective_allreduce: OpenMPI's MPI_Allreduce (float32, sum, in place) over
// the same sizes and the same way of timing as the Gloo paths. collective_allreduce runs it
// under mpirun in the same run; alone:
//   mpirun --allow-run-as-root --oversubscribe -np 4 build/bench/collective_allreduce_mpi 1024 1048576
// Prints, on rank 0, one line per size: "RESULT <bytes> <samples> <median seconds per all-reduce>".
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

// As in collective_allreduce.cc: ~2 s of samples, 10 .. 400, decided on rank 0.
int Samples(double seconds_per_allreduce) {
  return static_cast<int>(std::clamp(2.0 / std::max(seconds_per_allreduce, 1e-9), 10.0, 400.0));
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  int size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::vector<size_t> sizes;
  for (int i = 1; i < argc; ++i) sizes.push_back(std::strtoull(argv[i], nullptr, 10));
  size_t largest = 4;
  for (size_t s : sizes) largest = std::max(largest, s);
  std::vector<float> buffer(largest / sizeof(float), 0.0f);
  for (size_t bytes : sizes) {
    const int count = static_cast<int>(bytes / sizeof(float));
    for (int i = 0; i < 2; ++i) MPI_Allreduce(MPI_IN_PLACE, buffer.data(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    double start = MPI_Wtime();
    for (int i = 0; i < 3; ++i) MPI_Allreduce(MPI_IN_PLACE, buffer.data(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    int samples = Samples((MPI_Wtime() - start) / 3);
    MPI_Bcast(&samples, 1, MPI_INT, 0, MPI_COMM_WORLD);
    std::vector<double> times;
    for (int k = 0; k < samples; ++k) {
      start = MPI_Wtime();
      MPI_Allreduce(MPI_IN_PLACE, buffer.data(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      times.push_back(MPI_Wtime() - start);
    }
    std::sort(times.begin(), times.end());
    // Correctness: every rank contributes rank + 1.
    std::fill(buffer.begin(), buffer.begin() + count, static_cast<float>(rank + 1));
    MPI_Allreduce(MPI_IN_PLACE, buffer.data(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    const float want = static_cast<float>(size * (size + 1) / 2);
    if (buffer[0] != want || buffer[static_cast<size_t>(count) - 1] != want) {
      std::fprintf(stderr, "MPI_Allreduce gave %f, want %f\n", static_cast<double>(buffer[0]), static_cast<double>(want));
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    std::fill(buffer.begin(), buffer.end(), 0.0f);
    if (rank == 0) std::printf("RESULT %zu %d %.9f\n", bytes, samples, times[times.size() / 2]);  // median
    std::fflush(stdout);
  }
  MPI_Finalize();
  return 0;
}
