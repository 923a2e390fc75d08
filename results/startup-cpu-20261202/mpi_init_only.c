#include <mpi.h>
#include <stdio.h>
#include <time.h>
#include <sys/resource.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_REALTIME,&t);return t.tv_sec+t.tv_nsec*1e-9;}
int main(int c,char**v){double t0=now();MPI_Init(&c,&v);double t1=now();int r,n;MPI_Comm_rank(MPI_COMM_WORLD,&r);MPI_Comm_size(MPI_COMM_WORLD,&n);
 double x=1,y; double t2=now(); MPI_Allreduce(&x,&y,1,MPI_DOUBLE,MPI_SUM,MPI_COMM_WORLD); double t3=now();
 struct rusage u; getrusage(RUSAGE_SELF,&u); double cpu=u.ru_utime.tv_sec+u.ru_utime.tv_usec*1e-6+u.ru_stime.tv_sec+u.ru_stime.tv_usec*1e-6;
 double a[3]={t1,t3,cpu},mx[3],mn[3]; MPI_Reduce(a,mx,3,MPI_DOUBLE,MPI_MAX,0,MPI_COMM_WORLD); MPI_Reduce(&t0,mn,1,MPI_DOUBLE,MPI_MIN,0,MPI_COMM_WORLD);
 if(!r) printf("n=%d init_end_max=%.3f first_allreduce_end=%.3f (rel. to first start) cpu_max=%.3f\n",n,mx[0]-mn[0],mx[1]-mn[0],mx[2]);
 MPI_Finalize();return 0;}
