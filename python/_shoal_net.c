/* _shoal_net.c — placeholder while the module's communicator part is built. */
#include "_shoal.h"
int sh_py_net_add(PyObject *m) { return 0; }
