/* NCCL stand-ins for a CUDA backend built without NCCL (nonccl/nccl.h): one
 * GPU trains as usual; asking for several fails with this sentence. */
#include <nccl.h>

ncclResult_t ncclCommInitAll(ncclComm_t *comms, int ndev, const int *devlist) {
  (void)comms;
  (void)ndev;
  (void)devlist;
  return ncclInvalidUsage;
}
ncclResult_t ncclGetUniqueId(ncclUniqueId *uniqueId) {
  (void)uniqueId;
  return ncclInvalidUsage;
}
ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank) {
  (void)comm, (void)nranks, (void)commId, (void)rank;
  return ncclInvalidUsage;
}
ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  (void)comm;
  return ncclSuccess;
}
ncclResult_t ncclGroupStart(void) { return ncclSuccess; }
ncclResult_t ncclGroupEnd(void) { return ncclSuccess; }
ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                           cudaStream_t stream) {
  (void)sendbuff, (void)recvbuff, (void)count, (void)datatype, (void)op, (void)comm, (void)stream;
  return ncclInvalidUsage;
}
const char *ncclGetErrorString(ncclResult_t result) {
  return result == ncclSuccess ? "no error"
                               : "this CUDA backend was built without NCCL: one GPU only "
                                 "(data parallel over several GPUs or member processes needs NCCL; "
                                 "use --gpus 1 and one process)";
}
