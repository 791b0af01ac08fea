/* mpi.h — shoal over an MPI library (`make MPI=1`, Open MPI or MPICH): links made
 * of MPI point-to-point messages for shoal's own algorithms (SHOAL_TRANSPORT=mpi), and the
 * library's own collectives (SHOAL_ALGO=mpi). Built without MPI, both say how to get it.
 * Not here: the algorithms (coll/), the rendezvous (boot/boot.c: under mpirun the ranks come
 * from the launcher's variables).
 * Proved by tests/comm/test_mpi_transport.c (run under mpirun when built with MPI=1). */
#ifndef SH_COMM_MPI_H
#define SH_COMM_MPI_H

#include "comm/comm_internal.h"
#include "comm/transport/transport.h"

/* Make c->coll[p] and c->p2p[p] over MPI for every p with want[p]. Only for the whole job
 * (c's ranks are MPI_COMM_WORLD's); initialises MPI if the program has not. */
shoal_result sh_mpi_connect(shoal_comm *c, const unsigned char *want);
/* One collective by the MPI library (MPI_Allreduce, ...). float16/bfloat16 are refused. */
shoal_result sh_mpi_coll_run(shoal_comm *c, const sh_coll *op);
void sh_mpi_destroy(shoal_comm *c);

#endif
